"""One Thinker decoder layer: pre-norm attention then pre-norm MoE (or dense MLP), each with a residual."""
from __future__ import annotations

import torch
from torch import nn

from runtime.attention import AttentionContext
from runtime.kernels.rmsnorm import fused_add_rmsnorm, fused_add_rmsnorm_router
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

        x: [T, H] (with `residual` None, the layer input itself) -> (out [T, H], residual [T, H]).
        """
        h, residual = fused_add_rmsnorm(x, residual, self.input_layernorm.weight, self.input_layernorm.eps)
        attn = self.self_attn.forward_fused(h, cos, sin, kv_cache, ctx)
        norm = self.post_attention_layernorm
        if isinstance(self.mlp, SparseMoE):  # the router logits come out of the norm (one launch at decode sizes)
            h, residual, logits = fused_add_rmsnorm_router(attn, residual, norm.weight, self.mlp.gate.weight, norm.eps)
            return self.mlp.forward_fused(h, logits), residual
        h, residual = fused_add_rmsnorm(attn, residual, norm.weight, norm.eps)
        return self.mlp.forward_fused(h), residual
