"""Per-row (per-token) dynamic FP8 e4m3 quantization: one Triton pass on CUDA, the PyTorch reference otherwise.

Each row gets its own fp32 scale, amax(|row|) / 448, so its largest element lands on e4m3's largest finite value and
the row is stored as float8_e4m3fn values with row ≈ values · scale. Both paths compute the same float32 operations
(an exact amax, IEEE-rounded divisions, one product per element, saturation at ±448, round-to-nearest-even into e4m3),
so on the GPU they agree bit for bit. With `gelu_tanh` the rows first go through GELU's tanh form (the reference in
float32; the kernel, by default, with PTX tanh.approx on packed bf16 pairs: see fp8_quant_triton.GELU_FORMS): the
vision MLP's fc2 quantizes fc1's output that way, in the same pass.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton

__all__ = ["FP8_DTYPE", "FP8_MAX", "QuantizedRows", "dequantize_rows", "quantize_rows", "quantize_rows_reference",
           "scale_rows_reference"]

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # e4m3fn's largest finite value
# A row's amax is floored here so an all-zero row gets a finite scale (and zeros) instead of 0 / 0.
MIN_AMAX = 1e-12


class QuantizedRows(NamedTuple):
    values: torch.Tensor  # [M, K] float8_e4m3fn, contiguous
    scale: torch.Tensor  # [M, 1] float32, contiguous: row i ≈ values[i] · scale[i]


def scale_rows_reference(x: torch.Tensor, gelu_tanh: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] in any float dtype (GELU(x) with `gelu_tanh`) -> its rows in float32 scaled onto e4m3's range, not
    yet rounded into e4m3, and their scales [M, 1]."""
    xf = x.to(torch.float32)
    if gelu_tanh:
        xf = F.gelu(xf, approximate="tanh")
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=MIN_AMAX)  # [M, 1]
    # Tensor-by-tensor divisions: PyTorch rounds those as IEEE divisions, like the kernel's div_rn, where a Python
    # scalar on either side becomes a reciprocal times a product (two roundings). Each element is then multiplied by
    # the rounded inverse rather than divided: one division per row keeps the kernel's pass memory-bound.
    limit = torch.full_like(amax, FP8_MAX)
    inverse = limit / amax
    scaled = (xf * inverse).clamp(-FP8_MAX, FP8_MAX)  # the clamp catches amax · inverse > 448 by rounding
    return scaled, amax / limit


def quantize_rows_reference(x: torch.Tensor, gelu_tanh: bool = False) -> QuantizedRows:
    """x [M, K] in any float dtype -> e4m3 rows and their fp32 scales (of GELU(x) with `gelu_tanh`)."""
    scaled, scale = scale_rows_reference(x, gelu_tanh)
    return QuantizedRows(scaled.to(FP8_DTYPE).contiguous(), scale)  # round to nearest even


def dequantize_rows(rows: QuantizedRows) -> torch.Tensor:
    """values · scale in float32: what the FP8 GEMM sees of the quantized rows."""
    return rows.values.to(torch.float32) * rows.scale


def quantize_rows(x: torch.Tensor, gelu_tanh: bool = False) -> QuantizedRows:
    """x [M, K] with unit stride along K (any row stride) -> `QuantizedRows`; one Triton launch for CUDA tensors in
    bf16/fp16, the reference otherwise."""
    if use_triton(x) and x.dim() == 2 and x.stride(1) == 1:
        from runtime.kernels.fp8_quant_triton import quantize_rows_triton  # imports triton

        return quantize_rows_triton(x, gelu_tanh)
    return quantize_rows_reference(x, gelu_tanh)
