"""SwiGLU's activation on a fused gate/up GEMM output: Triton on CUDA in bf16/fp16, the reference otherwise."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton

__all__ = ["silu_mul", "silu_mul_reference"]


def silu_mul_reference(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] with columns [gate | up] -> silu(gate) * up [T, I], rounded as the unfused model rounds."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """`silu_mul_reference` in one launch on the GPU (two elementwise kernels and a strided read otherwise)."""
    if use_triton(gate_up) and gate_up.dim() == 2 and gate_up.stride(-1) == 1:
        from runtime.kernels.activation_triton import silu_mul_triton  # imports triton

        return silu_mul_triton(gate_up)
    return silu_mul_reference(gate_up)
