"""Plain-PyTorch residual-add + RMSNorm and q/k per-head RMSNorm + rotary, rounding as the model does."""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.attention.kv_cache import write_kv


class NormResult(NamedTuple):
    normed: torch.Tensor  # RMSNorm(x + residual) * weight, in x's dtype
    residual: torch.Tensor  # x + residual (x itself when there was no residual): the next layer's residual


class RoutedNorm(NamedTuple):
    normed: torch.Tensor  # as NormResult
    residual: torch.Tensor
    logits: torch.Tensor  # [T, E] MoE router logits normed @ router_w^T, in x's dtype


class QK(NamedTuple):
    q: torch.Tensor  # [T, Hq, D]
    k: torch.Tensor  # [T, Hkv, D]


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """weight * (x / rms(x)) over the last dim, computed in fp32 and rounded to x's dtype before the weight."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed


def zero_centred_rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Qwen3.5's norm: (1 + weight) * (x / rms(x)), all in fp32 and rounded to x's dtype once, at the end."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())).to(x.dtype)


def add_rmsnorm_reference(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6,
    zero_centred: bool = False,
) -> NormResult:
    """h = x + residual (in x's dtype, like the model's residual stream), then (rmsnorm(h), h); zero_centred: the
    norm is zero_centred_rmsnorm_reference."""
    h = x if residual is None else x + residual
    norm = zero_centred_rmsnorm_reference if zero_centred else rmsnorm_reference
    return NormResult(norm(h, weight, eps), h)


def add_rmsnorm_router_reference(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, router_w: torch.Tensor, eps: float = 1e-6,
    zero_centred: bool = False,
) -> RoutedNorm:
    """`add_rmsnorm_reference`, then the router logits of the normed rows (router_w [E, H], no bias)."""
    normed, h = add_rmsnorm_reference(x, residual, weight, eps, zero_centred)
    return RoutedNorm(normed, h, F.linear(normed, router_w))


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


def qk_norm_rope_cache_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, eps: float = 1e-6,
) -> torch.Tensor:
    """`qk_norm_rope_reference`, then k and v ([T, Hkv, D]) stored at their flat cache slots; returns q [T, Hq, D]."""
    qn, kn = qk_norm_rope_reference(q, k, q_weight, k_weight, cos, sin, eps)
    write_kv(kv_cache, kn, v, slot_mapping)
    return qn
