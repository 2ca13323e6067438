"""Qwen3.5's language model (dense or MoE) over packed tokens: embed, hybrid decoder stack (Gated-DeltaNet layers
with state slots, gated attention layers with paged KV), zero-centred final norm, logits.

Same contract as ThinkerLM (load, embed, forward -> LMOutput, compute_logits), plus the step's StateContext.
The plain-PyTorch path is exact (CPU, fp32); `enable_kernels` moves attention to the paged-attention kernels, the
MoE to the fused MoE, each residual add into the next norm's kernel, and (on CUDA with fla-core) the delta rule to
fla's Triton kernels; the conv and gated norm of the DeltaNet layers take their Triton kernels on CUDA either way.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from runtime.attention import AttentionContext, paged_attention
from runtime.kernels.rmsnorm import fused_add_rmsnorm
from runtime.weights import load_component
from services.thinker.model.attention import AttentionBackend
from services.thinker.model.checkpoint import fuse_experts
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_decoder import HybridDecoderLayer
from services.thinker.model.hybrid_norms import ZeroCentredRMSNorm
from services.thinker.model.kernel_path import build_from_state, kernel_attention
from services.thinker.model.linear_state import LinearStateCache, StateContext
from services.thinker.model.lm import DeepstackInput, LMOutput
from services.thinker.model.mlp import DenseMLP
from services.thinker.model.rope import MRoPE
from services.thinker.model.shared_moe import SharedExpertMoE

# Qwen3_5(Moe)ForConditionalGeneration's layout; checkpoints' `mtp.*` weights sit outside it and are never read
LM_PREFIX, HEAD_PREFIX = "model.language_model.", "lm_head."


class HybridLM(nn.Module):
    def __init__(self, cfg: ThinkerConfig, backend: AttentionBackend = paged_attention) -> None:
        super().__init__()
        if cfg.hybrid is None:
            raise ValueError("HybridLM needs a Qwen3.5 config (ThinkerConfig.hybrid); use ThinkerLM for Qwen3-Omni")
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(HybridDecoderLayer(cfg, i, backend) for i in range(cfg.num_layers))
        self.norm = ZeroCentredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rope = MRoPE(cfg.rope_dim, cfg.rope_theta, cfg.mrope_section)
        self.kv_layer = {layer: i for i, layer in enumerate(cfg.kv_layers)}  # decoder layer -> its kv_caches entry
        self.use_kernels = False

    @classmethod
    def load(cls, ckpt_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
             backend: AttentionBackend = paged_attention, use_kernels: bool | None = None) -> HybridLM:
        """From a Qwen3.5 checkpoint directory, reading only `model.language_model.*` and the LM head."""
        cfg = ThinkerConfig.from_checkpoint(ckpt_dir)
        return cls.from_state_dict(cfg, load_hybrid_state_dict(ckpt_dir, cfg, device, dtype), device, backend,
                                   use_kernels)

    @classmethod
    def from_state_dict(cls, cfg: ThinkerConfig, state: dict[str, torch.Tensor], device: torch.device | str = "cpu",
                        backend: AttentionBackend = paged_attention, use_kernels: bool | None = None) -> HybridLM:
        return build_from_state(lambda: cls(cfg, backend), state, device, use_kernels)

    def enable_kernels(self) -> None:
        """Paged attention and the MoE on runtime.kernels (their references off CUDA), each DeltaNet layer's input
        projections and each dense MLP's gate/up as one GEMM; the delta rule picks fla by itself on CUDA."""
        for layer in self.layers:
            if layer.is_linear:
                layer.linear_attn.fuse_in_proj()
            elif layer.self_attn.backend is paged_attention:
                layer.self_attn.backend = kernel_attention
            layer.fused_moe = isinstance(layer.mlp, SharedExpertMoE)
            if isinstance(layer.mlp, DenseMLP):
                layer.mlp.fuse_gate_up()
        self.use_kernels = True

    def allocate_states(self, num_slots: int, device: torch.device | str) -> LinearStateCache:
        assert self.cfg.hybrid is not None
        return LinearStateCache(self.cfg.hybrid, num_slots, self.lm_head.weight.dtype, device)

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """token_ids: [T] -> [T, H]."""
        return self.embed_tokens(token_ids)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext, kv_caches: list[torch.Tensor],
                deepstack: DeepstackInput | None = None, capture_layer: int | None = None,
                states: StateContext | None = None) -> LMOutput:
        """x: [T, H] input embeddings (media rows already replaced); positions: [3, T]; kv_caches: one per
        full-attention layer; states: the step's state slots (required: every Qwen3.5 has linear layers)."""
        if states is None:
            raise ValueError("a Qwen3.5 forward needs the step's StateContext (its Gated-DeltaNet state slots)")
        if deepstack is not None:
            raise ValueError("Qwen3.5 has no deepstack; its vision features enter as embeddings only")
        if len(kv_caches) != len(self.kv_layer):
            raise ValueError(f"kv_caches has {len(kv_caches)} layers; the model has {len(self.kv_layer)} "
                             "full-attention layers")
        if capture_layer is not None and not 1 <= capture_layer <= len(self.layers):
            raise ValueError(f"capture_layer {capture_layer} must be in 1..{len(self.layers)}")
        cos, sin = self.rope(positions, x.dtype)  # [T, rotary dims] each
        if self.use_kernels:
            return self._forward_fused(x, cos, sin, ctx, kv_caches, states, capture_layer)
        captured = None
        for i, layer in enumerate(self.layers):
            kv = kv_caches[self.kv_layer[i]] if i in self.kv_layer else None
            x = layer(x, cos, sin, kv, ctx, states)
            if capture_layer == i + 1:
                captured = x
        return LMOutput(hidden=self.norm(x), captured=captured)

    def _forward_fused(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: AttentionContext,
                       kv_caches: list[torch.Tensor], states: StateContext, capture_layer: int | None) -> LMOutput:
        """The kernel path: each residual add fused into the next zero-centred norm (see
        HybridDecoderLayer.forward_fused)."""
        residual: torch.Tensor | None = None
        captured = None
        for i, layer in enumerate(self.layers):
            kv = kv_caches[self.kv_layer[i]] if i in self.kv_layer else None
            x, residual = layer.forward_fused(x, residual, cos, sin, kv, ctx, states)
            if capture_layer == i + 1:
                captured = x + residual
        hidden, _ = fused_add_rmsnorm(x, residual, self.norm.weight, self.norm.eps, zero_centred=True)
        return LMOutput(hidden=hidden, captured=captured)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [N, H] -> [N, V] float32."""
        return self.lm_head(hidden).float()


def load_hybrid_state_dict(ckpt_dir: Path | str, cfg: ThinkerConfig, device: torch.device | str,
                           dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """HybridLM's state dict; a tied head is the embedding tensor itself. Experts stored per expert are fused."""
    tensors = load_component(Path(ckpt_dir), LM_PREFIX, device=device, dtype=dtype)
    if cfg.tie_word_embeddings:
        tensors["lm_head.weight"] = tensors["embed_tokens.weight"]
    else:
        tensors["lm_head.weight"] = load_component(Path(ckpt_dir), HEAD_PREFIX, device=device, dtype=dtype)["weight"]
    return fuse_experts(tensors, cfg)
