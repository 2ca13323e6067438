"""Decides whether a call can take the Triton path: CUDA tensors in a half dtype, with Triton importable."""
from __future__ import annotations

import functools
import importlib.util

import torch

TRITON_DTYPES = (torch.bfloat16, torch.float16)


@functools.cache
def triton_importable() -> bool:
    """True when the `triton` package can be imported (it ships with CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


def use_triton(*tensors: torch.Tensor) -> bool:
    """True when every tensor is on CUDA in bf16/fp16 and Triton is there; fp32 and CPU go to the exact reference."""
    return (
        triton_importable()
        and all(t.is_cuda for t in tensors)
        and all(t.dtype in TRITON_DTYPES for t in tensors if t.is_floating_point())
    )


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (>= 1)."""
    return 1 << max(0, (n - 1).bit_length())
