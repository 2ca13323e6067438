"""Residual add fused with the LayerNorm that reads the sum: one Triton pass on CUDA, the PyTorch reference otherwise.

Both paths round h = residual + y to the activation dtype first (the model stores its residual stream that way) and
normalise the rounded h in float32, so h agrees bit for bit and the normalised rows to the output dtype's rounding.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton

__all__ = ["NormedResidual", "add_layernorm", "add_layernorm_reference"]


class NormedResidual(NamedTuple):
    residual: torch.Tensor  # h = residual + y in the activation dtype: the next sublayer's residual
    normed: torch.Tensor  # layer_norm(h) in h's dtype: the next sublayer's input


def add_layernorm_reference(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> NormedResidual:
    """h = residual + y, then LayerNorm of h over the last dim, exactly as the unfused model computes them."""
    h = residual + y
    return NormedResidual(h, F.layer_norm(h, (h.shape[-1],), weight, bias, eps))


def add_layernorm(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> NormedResidual:
    """y, residual [rows, N] (a sublayer's output and the residual it adds to); weight, bias [N].

    On CUDA in bf16/fp16 one pass reads y and residual once and writes h and layer_norm(h) once each: four tensors'
    worth of memory traffic where the separate add and norm move five (the norm re-reads h). fp32 and CPU take the
    reference.
    """
    fusable = (
        use_triton(y, residual, weight, bias)
        and y.dim() == 2 and y.shape == residual.shape and y.dtype == residual.dtype
        and y.stride(1) == residual.stride(1) == 1
        and weight.shape == bias.shape == (y.shape[1],) and weight.is_contiguous() and bias.is_contiguous()
    )
    if fusable:
        from runtime.kernels.layernorm_triton import add_layernorm_triton  # imports triton

        return add_layernorm_triton(y, residual, weight, bias, eps)
    return add_layernorm_reference(y, residual, weight, bias, eps)
