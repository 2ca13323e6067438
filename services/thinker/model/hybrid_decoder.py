"""One Qwen3.5 decoder layer: zero-centred pre-norm, a Gated-DeltaNet or gated-attention token mixer, zero-centred
pre-norm, then the dense MLP or the shared-expert MoE, each with a residual."""
from __future__ import annotations

import torch
from torch import nn

from runtime.attention import AttentionContext
from runtime.kernels.rmsnorm import fused_add_rmsnorm, fused_add_rmsnorm_router
from services.thinker.model.attention import AttentionBackend
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.gated_attention import GatedAttention
from services.thinker.model.gated_deltanet import GatedDeltaNet
from services.thinker.model.hybrid_config import LINEAR
from services.thinker.model.hybrid_norms import ZeroCentredRMSNorm
from services.thinker.model.linear_state import StateContext
from services.thinker.model.mlp import DenseMLP
from services.thinker.model.shared_moe import SharedExpertMoE


class HybridDecoderLayer(nn.Module):
    def __init__(self, cfg: ThinkerConfig, layer: int, backend: AttentionBackend) -> None:
        super().__init__()
        assert cfg.hybrid is not None
        self.is_linear = cfg.hybrid.layer_types[layer] == LINEAR
        self.input_layernorm = ZeroCentredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if self.is_linear:
            self.linear_attn = GatedDeltaNet(cfg, cfg.hybrid.linear_layers.index(layer))
        else:
            self.self_attn = GatedAttention(cfg, backend)
        self.post_attention_layernorm = ZeroCentredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp: nn.Module = (
            SharedExpertMoE(cfg) if cfg.is_moe_layer(layer) else DenseMLP(cfg.hidden_size, cfg.intermediate_size)
        )
        self.fused_moe = False  # set by HybridLM.enable_kernels: the MoE takes runtime.kernels' fused path

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor | None,
                ctx: AttentionContext, states: StateContext) -> torch.Tensor:
        """x: [T, H] -> [T, H]. kv_cache: this layer's paged KV (None for a linear layer)."""
        h = self.input_layernorm(x)
        if self.is_linear:
            x = x + self.linear_attn(h, states)
        else:
            x = x + self.self_attn(h, cos, sin, kv_cache, ctx)
        h = self.post_attention_layernorm(x)
        return x + (self.mlp.forward_fused(h) if self.fused_moe else self.mlp(h))

    def forward_fused(self, x: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                      kv_cache: torch.Tensor | None, ctx: AttentionContext,
                      states: StateContext) -> tuple[torch.Tensor, torch.Tensor]:
        """The GPU path, residual carried apart: the layer output is `out + residual` (summed by the next norm, one
        fused add + zero-centred norm launch; the MoE's router logits come out of the second).

        x: [T, H] (with `residual` None, the layer input itself) -> (out [T, H], residual [T, H])."""
        norm = self.input_layernorm
        h, residual = fused_add_rmsnorm(x, residual, norm.weight, norm.eps, zero_centred=True)
        if self.is_linear:
            mixed = self.linear_attn(h, states)
        else:
            mixed = self.self_attn(h, cos, sin, kv_cache, ctx)
        norm = self.post_attention_layernorm
        if self.fused_moe:
            h, residual, logits = fused_add_rmsnorm_router(mixed, residual, norm.weight, self.mlp.gate.weight,
                                                           norm.eps, zero_centred=True)
            return self.mlp.forward_fused(h, logits), residual
        h, residual = fused_add_rmsnorm(mixed, residual, norm.weight, norm.eps, zero_centred=True)
        return self.mlp.forward_fused(h), residual
