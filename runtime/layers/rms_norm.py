"""RMSNorm as Qwen3-Omni uses it everywhere: normalise in fp32, cast back, then scale."""
from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """Normalises the last dimension; also used per head on q and k (weight of size head_dim)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The cast back happens before the weight multiply, so bf16 runs round where the checkpoint was trained to.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)
