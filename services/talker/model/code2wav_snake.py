"""SnakeBeta activation `x + sin^2(x * a) / b` in one pass, optionally writing the causal conv's zero padding too."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels._backend import triton_importable


def snake_reference(x: torch.Tensor, a: torch.Tensor, inv_b: torch.Tensor, left_pad: int = 0) -> torch.Tensor:
    """x `(B, T, C)`; a, inv_b `(C,)` fp32 -> `(B, left_pad + T, C)` in x's dtype, the first left_pad rows zero.

    Computed in fp32 and rounded once, as the Triton kernel does; for fp32 x it is the reference's own formula.
    """
    y = x.float()
    y = (y + inv_b * torch.sin(y * a).pow(2)).to(x.dtype)
    return F.pad(y, (0, 0, left_pad, 0)) if left_pad else y


def snake(x: torch.Tensor, a: torch.Tensor, inv_b: torch.Tensor, left_pad: int = 0) -> torch.Tensor:
    """`snake_reference`, in one Triton launch for CUDA tensors (any float dtype): one read and one write of x."""
    if x.is_cuda and triton_importable():
        from services.talker.model.code2wav_snake_triton import snake_triton  # imports triton

        return snake_triton(x.contiguous(), a, inv_b, left_pad)
    return snake_reference(x, a, inv_b, left_pad)
