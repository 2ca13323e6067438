"""RMSNorm entry points (residual add fused; q/k head norm + rotary fused): Triton on CUDA, the reference otherwise."""
from __future__ import annotations

import torch

from runtime.kernels._backend import next_power_of_2, use_triton
from runtime.kernels.rmsnorm_reference import QK, NormResult, add_rmsnorm_reference, qk_norm_rope_reference

__all__ = ["QK", "NormResult", "fused_add_rmsnorm", "qk_norm_rope", "rope_kernel_fits"]


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6
) -> NormResult:
    """h = x + residual; returns (weight * rmsnorm(h), h). With residual None, h is x (a decoder's first norm)."""
    if use_triton(x, weight) and (residual is None or use_triton(residual)) and x.stride(-1) == 1:
        from runtime.kernels.rmsnorm_triton import fused_add_rmsnorm_triton  # imports triton

        return fused_add_rmsnorm_triton(x, residual, weight, eps)
    return add_rmsnorm_reference(x, residual, weight, eps)


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


def rope_kernel_fits(head_dim: int) -> bool:
    """The fused q/k norm + rope kernel works on half-heads whose width is a power of two; others take the reference."""
    half = head_dim // 2
    return head_dim % 2 == 0 and half == next_power_of_2(half)
