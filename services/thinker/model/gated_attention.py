"""Qwen3.5's gated full attention: q_proj yields query and a per-channel output gate, zero-centred q/k RMSNorm,
RoPE on the leading rotary dims only, paged GQA attention, then sigmoid(gate) before o_proj."""
from __future__ import annotations

import torch
from torch import nn

from runtime.attention import AttentionContext, paged_attention
from services.thinker.model.attention import AttentionBackend
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_norms import ZeroCentredRMSNorm
from services.thinker.model.rope import apply_rope


def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D]; cos, sin: [T, R] with R <= D: the first R dims rotate, the rest pass through."""
    rotary = cos.shape[-1]
    return torch.cat((apply_rope(x[..., :rotary], cos, sin), x[..., rotary:]), dim=-1)


class GatedAttention(nn.Module):
    def __init__(self, cfg: ThinkerConfig, backend: AttentionBackend = paged_attention) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.head_dim ** -0.5
        self.backend = backend
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, 2 * cfg.num_heads * cfg.head_dim, bias=bias)  # per head: q, gate
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = ZeroCentredRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = ZeroCentredRMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """x: [T, H]; cos, sin: [T, rotary dims] -> [T, H]."""
        num_tokens, width = x.shape[0], self.num_heads * self.head_dim
        q, gate = self.q_proj(x).view(num_tokens, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)  # [T, Hq, D]
        q = apply_partial_rope(self.q_norm(q), cos, sin)
        k = apply_partial_rope(self.k_norm(self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)), cos, sin)
        v = self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        out = self.backend(q.contiguous(), k.contiguous(), v, kv_cache, ctx, self.scale)  # [T, Hq, D]
        gated = out.reshape(num_tokens, width) * torch.sigmoid(gate.reshape(num_tokens, width))
        return self.o_proj(gated)  # [T, Hq * D] -> [T, H]
