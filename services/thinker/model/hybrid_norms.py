"""Qwen3.5's two RMSNorms: zero-centred (scale 1 + w, weights stored around 0) and the DeltaNet output norm gated by
SiLU(z)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _normalise(x: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 x / rms(x) over the last dim."""
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)


class ZeroCentredRMSNorm(nn.Module):
    """Scales by (1 + w) in fp32 and casts last (unlike Qwen3-Omni's norm, which casts before its multiply)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (_normalise(x, self.eps) * (1.0 + self.weight.float())).to(x.dtype)


class GatedRMSNorm(nn.Module):
    """Per value head: w * norm(x) in x's dtype, times SiLU(gate) in fp32, cast back."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """x, gate: [..., D] -> [..., D]."""
        scaled = self.weight * _normalise(x, self.eps).to(x.dtype)
        return (scaled * F.silu(gate.float())).to(x.dtype)
