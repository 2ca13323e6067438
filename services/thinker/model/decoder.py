"""One Thinker decoder layer: pre-norm attention then pre-norm MoE (or dense MLP), each with a residual."""
from __future__ import annotations

import torch
from torch import nn

from runtime.attention import AttentionContext
from runtime.kernels.rmsnorm import fused_add_rmsnorm, fused_add_rmsnorm_router
from runtime.kernels.moe_config import SMALL_PATH_MAX_TOKENS
from runtime.kernels.skinny_gemm import SKINNY_MAX_ROWS, RowNorm
from services.thinker.model.attention import AttentionBackend, ThinkerAttention
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.mlp import DenseMLP
from services.thinker.model.moe import SparseMoE
from runtime.layers.rms_norm import RMSNorm


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ThinkerConfig, layer: int, backend: AttentionBackend) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = ThinkerAttention(cfg, backend)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp: nn.Module = (
            SparseMoE(cfg) if cfg.is_moe_layer(layer) else DenseMLP(cfg.hidden_size, cfg.intermediate_size)
        )
        self.norms_in_gemms = False  # set by ThinkerLM.use_norms_in_gemms: decode-sized steps take forward_stream
        # rows up to which forward_stream pays: the skinny GEMM's, or the small MoE path's (which adds the residual
        # in its last launch; past it the add would be a launch of its own)
        self.stream_rows = SMALL_PATH_MAX_TOKENS if isinstance(self.mlp, SparseMoE) else SKINNY_MAX_ROWS

    def can_stream(self) -> bool:
        """Whether forward_stream applies: a dense MLP or a MoE without a shared expert, and a plain o_proj without
        biases (a tensor-parallel split sums its partial outputs, which must not carry the residual once per rank)."""
        attn = self.self_attn
        return (type(self.mlp) in (DenseMLP, SparseMoE) and type(attn.o_proj) is nn.Linear
                and attn.o_proj.bias is None and attn.q_proj.bias is None)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_fused(
        self, x: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
        kv_cache: torch.Tensor, ctx: AttentionContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The GPU path, residual carried apart: the layer output is `out + residual` (summed by the next norm).

        x: [T, H] (with `residual` None, the layer input itself) -> (out [T, H], residual [T, H]), or, through
        forward_stream, (the layer output itself, None).
        """
        if self.norms_in_gemms and x.shape[0] <= self.stream_rows:
            return self.forward_stream(x if residual is None else x + residual, cos, sin, kv_cache, ctx), None
        h, residual = fused_add_rmsnorm(x, residual, self.input_layernorm.weight, self.input_layernorm.eps)
        attn = self.self_attn.forward_fused(h, cos, sin, kv_cache, ctx)
        norm = self.post_attention_layernorm
        if isinstance(self.mlp, SparseMoE):  # the router logits come out of the norm (one launch at decode sizes)
            h, residual, logits = fused_add_rmsnorm_router(attn, residual, norm.weight, self.mlp.gate.weight, norm.eps)
            return self.mlp.forward_fused(h, logits), residual
        h, residual = fused_add_rmsnorm(attn, residual, norm.weight, norm.eps)
        return self.mlp.forward_fused(h), residual

    def forward_stream(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """The layer at decode sizes on the residual stream x: each RMSNorm inside the GEMM that reads it, each
        residual add in the epilogue of the GEMM that writes it. A dense layer launches no norm; a MoE layer keeps
        the post-attention norm, which computes the router logits beside it."""
        norm = self.input_layernorm
        x = self.self_attn.forward_fused(x, cos, sin, kv_cache, ctx, norm=RowNorm(norm.weight, norm.eps))
        norm = self.post_attention_layernorm
        if isinstance(self.mlp, SparseMoE):
            h, _, logits = fused_add_rmsnorm_router(x, None, norm.weight, self.mlp.gate.weight, norm.eps)
            return self.mlp.forward_fused(h, logits, residual=x)
        return self.mlp.forward_stream(x, RowNorm(norm.weight, norm.eps))
