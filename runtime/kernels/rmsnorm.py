"""RMSNorm entry points (residual add fused, optionally the MoE router too; q/k head norm + rotary fused, optionally
storing k/v in the paged cache): Triton on CUDA, the reference otherwise."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels._backend import next_power_of_2, use_triton
from runtime.kernels.rmsnorm_reference import (
    QK, NormResult, RoutedNorm, add_rmsnorm_reference, qk_norm_rope_cache_reference, qk_norm_rope_reference,
)

__all__ = ["QK", "NormResult", "RoutedNorm", "fused_add_rmsnorm", "fused_add_rmsnorm_router", "qk_norm_rope",
           "qk_norm_rope_cache", "rope_kernel_fits"]

# Up to this many rows the router logits are computed inside the norm kernel (CUDA-core dot products, one launch
# fewer); past it the norm and a cuBLAS router GEMM. On the H200 the norm's logits still won at 32 rows (MoE layer
# with grouped GEMMs 268.5 us vs 270.8 with the GEMM, bench_decode_layer.py `after_grouped_ms`); not measured past.
ROUTER_IN_NORM_MAX_TOKENS = 32


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6,
    zero_centred: bool = False,
) -> NormResult:
    """h = x + residual; returns (weight * rmsnorm(h), h). With residual None, h is x (a decoder's first norm).
    zero_centred: Qwen3.5's norm instead, (1 + weight) * rmsnorm(h) in fp32, rounded once."""
    if use_triton(x, weight) and (residual is None or use_triton(residual)) and x.stride(-1) == 1:
        from runtime.kernels.rmsnorm_triton import fused_add_rmsnorm_triton  # imports triton

        return fused_add_rmsnorm_triton(x, residual, weight, eps, zero_centred)
    return add_rmsnorm_reference(x, residual, weight, eps, zero_centred)


def fused_add_rmsnorm_router(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, router_w: torch.Tensor, eps: float = 1e-6,
    zero_centred: bool = False,
) -> RoutedNorm:
    """`fused_add_rmsnorm` plus the MoE router logits of its output, normed @ router_w^T ([T, E], x's dtype)."""
    if (use_triton(x, weight, router_w) and (residual is None or use_triton(residual)) and x.dim() == 2
            and x.stride(-1) == 1 and x.shape[0] <= ROUTER_IN_NORM_MAX_TOKENS):
        from runtime.kernels.rmsnorm_triton import fused_add_rmsnorm_router_triton  # imports triton

        return fused_add_rmsnorm_router_triton(x, residual, weight, router_w, eps, zero_centred)
    normed, h = fused_add_rmsnorm(x, residual, weight, eps, zero_centred)
    return RoutedNorm(normed, h, F.linear(normed, router_w))


def qk_norm_rope(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, eps: float = 1e-6,
) -> QK:
    """Per-head RMSNorm of q [T, Hq, D] and k [T, Hkv, D] then rotary with per-token cos/sin [T, D]."""
    if (use_triton(q, k, q_weight, k_weight) and q.stride(-1) == 1 and k.stride(-1) == 1 and cos.is_cuda
            and rope_kernel_fits(q.shape[-1])):
        from runtime.kernels.rmsnorm_triton import qk_norm_rope_triton  # imports triton

        return qk_norm_rope_triton(q, k, q_weight, k_weight, cos, sin, eps)
    return qk_norm_rope_reference(q, k, q_weight, k_weight, cos, sin, eps)


def qk_norm_rope_cache(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, eps: float = 1e-6,
) -> torch.Tensor:
    """`qk_norm_rope`, with k and v ([T, Hkv, D]) stored at their flat slots of kv_cache [2, NB, BS, Hkv, D] instead
    of returned (the attention then reads them from the cache); returns q [T, Hq, D]."""
    if (use_triton(q, k, v, q_weight, k_weight, kv_cache) and cos.is_cuda and slot_mapping.is_cuda
            and kv_cache.is_contiguous() and all(t.stride(-1) == 1 for t in (q, k, v))
            and rope_kernel_fits(q.shape[-1])):
        from runtime.kernels.rmsnorm_triton import qk_norm_rope_cache_triton  # imports triton

        return qk_norm_rope_cache_triton(q, k, v, q_weight, k_weight, cos, sin, kv_cache, slot_mapping, eps)
    return qk_norm_rope_cache_reference(q, k, v, q_weight, k_weight, cos, sin, kv_cache, slot_mapping, eps)


def rope_kernel_fits(head_dim: int) -> bool:
    """The fused q/k norm + rope kernel works on half-heads whose width is a power of two; others take the reference."""
    half = head_dim // 2
    return head_dim % 2 == 0 and half == next_power_of_2(half)
