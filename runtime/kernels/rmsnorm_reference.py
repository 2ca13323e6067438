"""Plain-PyTorch residual-add + RMSNorm and q/k per-head RMSNorm + rotary, rounding as the model does."""
from __future__ import annotations

from typing import NamedTuple

import torch


class NormResult(NamedTuple):
    normed: torch.Tensor  # RMSNorm(x + residual) * weight, in x's dtype
    residual: torch.Tensor  # x + residual (x itself when there was no residual): the next layer's residual


class QK(NamedTuple):
    q: torch.Tensor  # [T, Hq, D]
    k: torch.Tensor  # [T, Hkv, D]


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """weight * (x / rms(x)) over the last dim, computed in fp32 and rounded to x's dtype before the weight."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed


def add_rmsnorm_reference(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6
) -> NormResult:
    """h = x + residual (in x's dtype, like the model's residual stream), then (rmsnorm(h), h)."""
    h = x if residual is None else x + residual
    return NormResult(rmsnorm_reference(h, weight, eps), h)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def qk_norm_rope_reference(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, eps: float = 1e-6,
) -> QK:
    """Per-head RMSNorm of q [T, Hq, D] and k [T, Hkv, D], then rotary with per-token cos/sin [T, D] (M-RoPE ready)."""
    cos = cos.to(q.dtype)[:, None, :]  # [T, 1, D]; the model casts cos/sin to the activations' dtype
    sin = sin.to(q.dtype)[:, None, :]
    qn = rmsnorm_reference(q, q_weight, eps)
    kn = rmsnorm_reference(k, k_weight, eps)
    return QK(qn * cos + rotate_half(qn) * sin, kn * cos + rotate_half(kn) * sin)
