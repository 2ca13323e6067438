"""The Thinker language model over packed tokens and a paged KV cache: embed, decoder stack, final norm, logits.

Two paths with one contract: the exact plain-PyTorch reference (CPU, fp32, any device without the kernels) and the
GPU path over runtime.kernels (fused residual-add + RMSNorm, one q/k/v GEMM, q/k norm + rope, Triton paged
attention, fused MoE), chosen at load by device and dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from runtime.attention import AttentionContext, paged_attention
from runtime.kernels import fused_add_rmsnorm
from services.thinker.model.attention import AttentionBackend
from services.thinker.model.checkpoint import load_thinker_state_dict
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.decoder import DecoderLayer
from services.thinker.model.kernel_path import build_from_state, kernel_attention
from services.thinker.model.mlp import DenseMLP
from runtime.layers.rms_norm import RMSNorm
from services.thinker.model.rope import MRoPE


@dataclass
class DeepstackInput:
    """Vision deepstack features: `features[i]` ([M, H]) is added to rows `row_index` ([M]) after decoder layer i."""

    row_index: torch.Tensor  # int64 [M], rows of x holding image/video tokens (any order, distinct)
    features: list[torch.Tensor]  # each [M, H], aligned with row_index


@dataclass
class LMOutput:
    hidden: torch.Tensor  # [T, H] final normed hidden states
    captured: torch.Tensor | None  # [T, H] output of decoder layer `capture_layer` (1-based, un-normed), or None


class ThinkerLM(nn.Module):
    def __init__(self, cfg: ThinkerConfig, backend: AttentionBackend = paged_attention) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, backend) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)  # untied from embed_tokens
        self.rope = MRoPE(cfg.head_dim, cfg.rope_theta, cfg.mrope_section)
        self.use_kernels = False  # set by enable_kernels: forward takes the GPU path

    @classmethod
    def load(
        cls,
        ckpt_dir: Path | str,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        backend: AttentionBackend = paged_attention,
        use_kernels: bool | None = None,
    ) -> ThinkerLM:
        """Build from an HF checkpoint directory, reading only `thinker.model.*` and `thinker.lm_head.*`.

        use_kernels: None picks the GPU path on CUDA in bf16/fp16 (Triton importable), the reference otherwise.
        """
        cfg = ThinkerConfig.from_checkpoint(ckpt_dir)
        return cls.from_state_dict(cfg, load_thinker_state_dict(ckpt_dir, cfg, device, dtype), device, backend,
                                   use_kernels)

    @classmethod
    def from_state_dict(
        cls,
        cfg: ThinkerConfig,
        state: dict[str, torch.Tensor],
        device: torch.device | str = "cpu",
        backend: AttentionBackend = paged_attention,
        use_kernels: bool | None = None,
    ) -> ThinkerLM:
        """Parameters are created on the meta device and replaced by `state`'s tensors, so weights exist once."""
        return build_from_state(lambda: cls(cfg, backend), state, device, use_kernels)

    def enable_kernels(self) -> None:
        """Switch forward to the GPU path: q/k/v weights, and a dense MLP's gate/up, fused into one GEMM each (as
        views, no second copy) and the Triton paged attention unless a custom backend was given. Off CUDA the
        kernels fall back to their references, which keeps this path testable on CPU."""
        for layer in self.layers:
            attn = layer.self_attn
            attn.fuse_qkv()
            if isinstance(layer.mlp, DenseMLP):
                layer.mlp.fuse_gate_up()
            if attn.backend is paged_attention:
                attn.backend = kernel_attention
        self.use_kernels = True

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """token_ids: [T] -> [T, H]."""
        return self.embed_tokens(token_ids)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        ctx: AttentionContext,
        kv_caches: list[torch.Tensor],
        deepstack: DeepstackInput | None = None,
        capture_layer: int | None = None,
    ) -> LMOutput:
        """x: [T, H] input embeddings (media rows already replaced), positions: [3, T] (t, h, w)."""
        if len(kv_caches) != len(self.layers):
            raise ValueError(f"kv_caches has {len(kv_caches)} layers; the model has {len(self.layers)}")
        if capture_layer is not None and not 1 <= capture_layer <= len(self.layers):
            raise ValueError(f"capture_layer {capture_layer} must be in 1..{len(self.layers)}")
        num_deepstack = len(deepstack.features) if deepstack is not None else 0
        if num_deepstack > len(self.layers):
            raise ValueError(f"{num_deepstack} deepstack features but only {len(self.layers)} decoder layers")
        cos, sin = self.rope(positions, x.dtype)  # [T, D] each, shared by every layer
        if self.use_kernels:
            return self._forward_fused(x, cos, sin, ctx, kv_caches, deepstack, capture_layer)
        captured = None
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, kv_caches[i], ctx)
            if capture_layer == i + 1:
                captured = x  # the talker reads the layer output before any deepstack add
            if i < num_deepstack:
                x = x.index_add(0, deepstack.row_index, deepstack.features[i].to(x.dtype))
        return LMOutput(hidden=self.norm(x), captured=captured)

    def _forward_fused(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: AttentionContext,
        kv_caches: list[torch.Tensor], deepstack: DeepstackInput | None, capture_layer: int | None,
    ) -> LMOutput:
        """The GPU path: the residual travels beside each layer's output and is summed inside the next fused norm;
        it is summed early only where the talker capture or a deepstack add needs the layer output itself."""
        num_deepstack = len(deepstack.features) if deepstack is not None else 0
        residual: torch.Tensor | None = None
        captured = None
        for i, layer in enumerate(self.layers):
            x, residual = layer.forward_fused(x, residual, cos, sin, kv_caches[i], ctx)
            if capture_layer == i + 1 or i < num_deepstack:
                x, residual = x + residual, None
                if capture_layer == i + 1:
                    captured = x
                if i < num_deepstack:
                    x = x.index_add(0, deepstack.row_index, deepstack.features[i].to(x.dtype))
        hidden = fused_add_rmsnorm(x, residual, self.norm.weight, self.norm.eps).normed
        return LMOutput(hidden=hidden, captured=captured)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> [N, V] float32."""
        return self.lm_head(hidden).float()
