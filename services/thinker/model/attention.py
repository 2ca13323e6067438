"""Thinker self-attention: q/k/v projections, per-head q/k RMSNorm, M-RoPE, then paged GQA attention.

`forward` is the exact reference; `forward_fused` is the GPU path (one q/k/v GEMM; q/k norm + rope in one kernel,
which with the kernel backend also stores k/v in the paged cache).
"""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from runtime.attention import AttentionContext, paged_attention
from runtime.kernels.rmsnorm import qk_norm_rope, qk_norm_rope_cache
from runtime.kernels.skinny_gemm import SKINNY_MAX_ROWS, skinny_linear
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.kernel_path import kernel_attention, kernel_attention_cached
from runtime.layers.rms_norm import RMSNorm
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
        self.qkv_weight: torch.Tensor | None = None  # set by fuse_qkv for the GPU path
        self.qkv_bias: torch.Tensor | None = None

    def fuse_qkv(self) -> None:
        """One [(Hq + 2 Hkv) * D, H] weight for a single GEMM; q/k/v_proj become views of it, so nothing doubles."""
        projs = (self.q_proj, self.k_proj, self.v_proj)
        self.qkv_weight = torch.cat([p.weight for p in projs])
        self.qkv_bias = torch.cat([p.bias for p in projs]) if self.q_proj.bias is not None else None
        start = 0
        for p in projs:
            rows = p.weight.shape[0]
            p.weight = nn.Parameter(self.qkv_weight[start:start + rows], requires_grad=False)
            if self.qkv_bias is not None:
                p.bias = nn.Parameter(self.qkv_bias[start:start + rows], requires_grad=False)
            start += rows

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

    def forward_fused(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """`forward` on the kernels: x: [T, H] -> [T, H]."""
        if self.qkv_weight is None:
            self.fuse_qkv()
        num_tokens = x.shape[0]
        q_width, kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        qkv = F.linear(x, self.qkv_weight, self.qkv_bias)  # [T, (Hq + 2 Hkv) * D]
        q = qkv[:, :q_width].view(num_tokens, self.num_heads, self.head_dim)  # [T, Hq, D], strided view
        k = qkv[:, q_width:q_width + kv_width].view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        v = qkv[:, q_width + kv_width:].view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        if self.backend is kernel_attention:
            # one launch normalises and rotates q/k and stores k/v at their slots (no separate cache write)
            q = qk_norm_rope_cache(q, k, v, self.q_norm.weight, self.k_norm.weight, cos, sin, kv_cache,
                                   ctx.slot_mapping, self.q_norm.eps)
            out = kernel_attention_cached(q, kv_cache, ctx, self.scale)  # [T, Hq, D]
        else:
            q, k = qk_norm_rope(q, k, self.q_norm.weight, self.k_norm.weight, cos, sin, self.q_norm.eps)
            out = self.backend(q, k, v, kv_cache, ctx, self.scale)  # [T, Hq, D]
        out = out.reshape(num_tokens, self.num_heads * self.head_dim)  # [T, Hq * D]
        if out.is_cuda and num_tokens <= SKINNY_MAX_ROWS and self.o_on_skinny_gemm():
            return skinny_linear(out, self.o_proj.weight)
        return self.o_proj(out)  # [T, H]

    def o_on_skinny_gemm(self) -> bool:
        """Whether decode-sized steps on CUDA run o_proj on the skinny GEMM: where K is at least twice the outputs
        (the Omni thinker's 4096 -> 2048), which cuBLAS runs split-K with a reduce launch after it. On one H100 at one
        row: thinker.o 9.29 us ours against 10.45; a square o (Qwen3-ASR's 2048 -> 2048) 6.65 against 6.23 stays in
        cuBLAS (bench/kernels/NOTES.md run 6). A tensor-parallel o_proj sums over its ranks itself: not this path."""
        o = self.o_proj
        return type(o) is nn.Linear and o.bias is None and o.in_features >= 2 * o.out_features
