"""Qwen3.5's two RMSNorms: zero-centred (scale 1 + w, weights stored around 0) and the DeltaNet output norm gated by
SiLU(z). Their math lives in runtime.kernels (the references here, one fused kernel each on the GPU path)."""
from __future__ import annotations

import torch
from torch import nn

from runtime.kernels.gated_rmsnorm import gated_rmsnorm
from runtime.kernels.rmsnorm_reference import zero_centred_rmsnorm_reference


class ZeroCentredRMSNorm(nn.Module):
    """Scales by (1 + w) in fp32 and casts last (unlike Qwen3-Omni's norm, which casts before its multiply)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return zero_centred_rmsnorm_reference(x, self.weight, self.eps)


class GatedRMSNorm(nn.Module):
    """Per value head: w * norm(x) in x's dtype, times SiLU(gate) in fp32, cast back."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """x, gate: [..., D] -> [..., D]."""
        return gated_rmsnorm(x, gate, self.weight, self.eps)
