"""Residual add fused with the LayerNorm that reads the sum: one Triton pass on CUDA, the PyTorch reference otherwise.

Both paths round h = residual + y to the activation dtype first (the model stores its residual stream that way) and
normalise the rounded h in float32, so h agrees bit for bit and the normalised rows to the output dtype's rounding.

`add_layernorm_fp8` writes the normalised rows straight into per-row FP8 e4m3 (`QuantizedRows`) for an FP8 GEMM
that reads them: the rows are rounded to h's dtype first, exactly as `add_layernorm` would store them, then
quantized with `fp8_quant`'s arithmetic. On CUDA the one pass therefore equals `add_layernorm` followed by
`quantize_rows` bit for bit; the reference is that composition, which the kernel matches to within one e4m3 step
(its float32 statistics may move a normalised value by an ulp of h's dtype).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton
from runtime.kernels.fp8_quant import QuantizedRows, quantize_rows_reference

__all__ = ["NormedResidual", "QuantizedNormedResidual", "add_layernorm", "add_layernorm_fp8",
           "add_layernorm_fp8_reference", "add_layernorm_reference"]


class NormedResidual(NamedTuple):
    residual: torch.Tensor  # h = residual + y in the activation dtype: the next sublayer's residual
    normed: torch.Tensor  # layer_norm(h) in h's dtype: the next sublayer's input


class QuantizedNormedResidual(NamedTuple):
    residual: torch.Tensor  # h = residual + y in the activation dtype: the residual stream stays unquantized
    normed: QuantizedRows  # layer_norm(h) rounded to h's dtype, then per-row e4m3: an FP8 linear's input


def add_layernorm_reference(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> NormedResidual:
    """h = residual + y, then LayerNorm of h over the last dim, exactly as the unfused model computes them."""
    h = residual + y
    return NormedResidual(h, F.layer_norm(h, (h.shape[-1],), weight, bias, eps))


def add_layernorm_fp8_reference(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> QuantizedNormedResidual:
    """`add_layernorm_reference`, its normalised rows then quantized per row to e4m3."""
    h, normed = add_layernorm_reference(y, residual, weight, bias, eps)
    return QuantizedNormedResidual(h, quantize_rows_reference(normed))


def _fusable(y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> bool:
    """The shapes and layouts the Triton pass takes (CUDA, bf16/fp16)."""
    return (
        use_triton(y, residual, weight, bias)
        and y.dim() == 2 and y.shape == residual.shape and y.dtype == residual.dtype
        and y.stride(1) == residual.stride(1) == 1
        and weight.shape == bias.shape == (y.shape[1],) and weight.is_contiguous() and bias.is_contiguous()
    )


def add_layernorm(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> NormedResidual:
    """y, residual [rows, N] (a sublayer's output and the residual it adds to); weight, bias [N].

    On CUDA in bf16/fp16 one pass reads y and residual once and writes h and layer_norm(h) once each: four tensors'
    worth of memory traffic where the separate add and norm move five (the norm re-reads h). fp32 and CPU take the
    reference.
    """
    if _fusable(y, residual, weight, bias):
        from runtime.kernels.layernorm_triton import add_layernorm_triton  # imports triton

        return add_layernorm_triton(y, residual, weight, bias, eps)
    return add_layernorm_reference(y, residual, weight, bias, eps)


def add_layernorm_fp8(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> QuantizedNormedResidual:
    """`add_layernorm` whose normalised rows come back as per-row e4m3 with float32 scales.

    On CUDA in bf16/fp16 one pass writes h and one e4m3 byte per element (plus a scale per row) where
    `add_layernorm` then `quantize_rows` also write the normalised rows in h's dtype and read them back. fp32 and
    CPU take the reference.
    """
    if _fusable(y, residual, weight, bias):
        from runtime.kernels.layernorm_triton import add_layernorm_fp8_triton  # imports triton

        return add_layernorm_fp8_triton(y, residual, weight, bias, eps)
    return add_layernorm_fp8_reference(y, residual, weight, bias, eps)
