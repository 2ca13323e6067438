"""SnakeBeta activation `x + sin^2(x * a) / b` in one pass, optionally writing the causal conv's zero padding too."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels._backend import triton_importable


def snake_reference(x: torch.Tensor, a: torch.Tensor, inv_b: torch.Tensor, left_pad: int = 0) -> torch.Tensor:
    """x `(B, C, T)`; a, inv_b `(C,)` fp32 -> `(B, C, left_pad + T)` in x's dtype, the first left_pad columns zero.

    Computed in fp32 and rounded once, as the Triton kernel does; for fp32 x it is the reference's own formula.
    """
    y = x.float()
    y = (y + inv_b[:, None] * torch.sin(y * a[:, None]).pow(2)).to(x.dtype)
    return F.pad(y, (left_pad, 0)) if left_pad else y


def rows_uniform(x: torch.Tensor) -> bool:
    """Whether `(B, C, T)` x is B*C rows of T contiguous samples at one row stride (the trimmed trans-conv views)."""
    b, c, t = x.shape
    return (x.stride(2) == 1 or t == 1) and (b == 1 or x.stride(0) == c * x.stride(1))


def snake(x: torch.Tensor, a: torch.Tensor, inv_b: torch.Tensor, left_pad: int = 0) -> torch.Tensor:
    """`snake_reference`, in one Triton launch for CUDA tensors (any float dtype): one read and one write of x."""
    if x.is_cuda and triton_importable():
        from services.talker.model.code2wav_snake_triton import snake_triton  # imports triton

        return snake_triton(x if rows_uniform(x) else x.contiguous(), a, inv_b, left_pad)
    return snake_reference(x, a, inv_b, left_pad)
