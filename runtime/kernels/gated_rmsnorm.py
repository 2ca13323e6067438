"""Gated DeltaNet's output norm, per value head: weight * rmsnorm(x) in x's dtype, times SiLU(gate) in fp32, rounded
back. One Triton launch on CUDA in half precision (ten small kernels in plain torch), the reference elsewhere."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels._backend import next_power_of_2, use_triton


def gated_rmsnorm_reference(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x, gate: [..., D]; weight [D] -> [..., D] in x's dtype (rounded where transformers' Qwen3.5 rounds)."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (weight * normed * F.silu(gate.float())).to(x.dtype)


def gated_rmsnorm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x, gate: [T, H, D] (gate may be a view of a wider projection output) -> [T, H, D]."""
    if (use_triton(x, gate, weight) and x.dim() == 3 and x.is_contiguous() and gate.shape == x.shape
            and gate.stride(2) == 1 and gate.stride(1) == x.shape[2] and x.shape[2] == next_power_of_2(x.shape[2])):
        from runtime.kernels.gated_rmsnorm_triton import gated_rmsnorm_triton  # imports triton

        return gated_rmsnorm_triton(x, gate, weight, eps)
    return gated_rmsnorm_reference(x, gate, weight, eps)
