"""Thinker self-attention: q/k/v projections, per-head q/k RMSNorm, M-RoPE, then paged GQA attention."""
from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from runtime.attention import AttentionContext, paged_attention
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.norm import RMSNorm
from services.thinker.model.rope import apply_rope


class AttentionBackend(Protocol):
    """Writes k/v into the paged cache and attends: the plain-PyTorch reference or a GPU kernel of the same contract."""

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext,
        scale: float,
    ) -> torch.Tensor: ...


class ThinkerAttention(nn.Module):
    def __init__(self, cfg: ThinkerConfig, backend: AttentionBackend = paged_attention) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.head_dim ** -0.5
        self.backend = backend
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        num_tokens = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(num_tokens, self.num_heads, self.head_dim))  # [T, Hq, D]
        k = self.k_norm(self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim))  # [T, Hkv, D]
        v = self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = self.backend(q, k, v, kv_cache, ctx, self.scale)  # [T, Hq, D]
        return self.o_proj(out.reshape(num_tokens, self.num_heads * self.head_dim))  # [T, Hq * D] -> [T, H]
