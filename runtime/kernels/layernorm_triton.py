"""Triton kernel: residual add and the LayerNorm that follows it in one pass over the rows, the normalised rows
written in the activation dtype or, for an FP8 linear that reads them, as per-row e4m3 with float32 scales."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.fp8_quant import FP8_DTYPE, QuantizedRows
from runtime.kernels.fp8_quant_triton import row_scales, to_e4m3
from runtime.kernels.layernorm import NormedResidual, QuantizedNormedResidual

TILE_ELEMENTS = 2048  # elements per program: the released width (1152, padded to 2048) is one row per program
MAX_WARPS = 8  # 2048 elements over 8 warps: one 16-byte vector of bf16 per thread and tensor


@triton.jit
def _add_layernorm_kernel(
    y_ptr, x_ptr, w_ptr, b_ptr, h_ptr, out_ptr, scale_ptr, num_rows, N, eps, stride_y, stride_x,
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, FP8_OUT: tl.constexpr,
):
    """BLOCK_ROWS rows: h = x + y rounded to the activation dtype and stored, then LayerNorm of the rounded h with
    float32 statistics (two passes over registers: mean, then the centred variance) and one rounding at the end.
    With FP8_OUT the normalised rows, so rounded, are quantized per row into out_ptr (e4m3) and scale_ptr."""
    row_ids = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    rows = row_ids[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    col_ok = cols < N
    mask = (rows < num_rows) & col_ok
    x = tl.load(x_ptr + rows * stride_x + cols, mask=mask, other=0.0)
    y = tl.load(y_ptr + rows * stride_y + cols, mask=mask, other=0.0)
    # the unfused add computes in float32 and rounds once to the activation dtype; the norm reads that rounded h
    h = (x.to(tl.float32) + y.to(tl.float32)).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + rows * N + cols, h, mask=mask)
    hf = h.to(tl.float32)
    mean = tl.sum(hf, 1)[:, None] / N  # padded columns load as 0 and add nothing
    centred = tl.where(col_ok, hf - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centred * centred, 1)[:, None] / N + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    normed = (centred * rstd * w + b).to(h_ptr.dtype.element_ty)
    if FP8_OUT:
        # quantize_rows' arithmetic (fp8_quant_triton) on the rows rounded as the unfused norm stores them, so this
        # pass equals the norm followed by quantize_rows bit for bit (padded columns are 0: the amax is exact)
        nf = normed.to(tl.float32)
        scale, inverse = row_scales(tl.max(tl.abs(nf), axis=1))
        tl.store(out_ptr + rows * N + cols, to_e4m3(nf, inverse).to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(scale_ptr + row_ids, scale, mask=row_ids < num_rows)
    else:
        tl.store(out_ptr + rows * N + cols, normed, mask=mask)


def _launch(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, h: torch.Tensor,
    out: torch.Tensor, scale: torch.Tensor | None, block_rows: int | None, num_warps: int | None,
) -> None:
    """One launch over every row; with `scale` the kernel quantizes the normed rows into `out` (e4m3)."""
    rows, n = y.shape
    assert residual.shape == y.shape and y.stride(1) == residual.stride(1) == 1
    assert weight.shape == bias.shape == (n,) and weight.is_contiguous() and bias.is_contiguous()
    if rows == 0:
        return
    block_n = next_power_of_2(n)
    block_rows = block_rows or max(1, TILE_ELEMENTS // block_n)  # narrow rows share a program
    num_warps = num_warps or min(max(block_rows * block_n // 256, 1), MAX_WARPS)
    _add_layernorm_kernel[(triton.cdiv(rows, block_rows),)](
        y, residual, weight, bias, h, out, scale, rows, n, eps, y.stride(0), residual.stride(0),
        BLOCK_ROWS=block_rows, BLOCK_N=block_n, FP8_OUT=scale is not None, num_warps=num_warps,
    )


def add_layernorm_triton(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
    block_rows: int | None = None, num_warps: int | None = None,
) -> NormedResidual:
    """`add_layernorm_reference` in one launch. y, residual [rows, N] with unit stride along N (any row stride);
    weight, bias contiguous [N]. h and the normed rows come back as new contiguous [rows, N] tensors.

    block_rows and num_warps override the defaults (one padded row of the released width per program, 8 warps):
    the benchmark sweeps them.
    """
    h = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    normed = torch.empty_like(h)
    _launch(y, residual, weight, bias, eps, h, normed, None, block_rows, num_warps)
    return NormedResidual(h, normed)


def add_layernorm_fp8_triton(
    y: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
    block_rows: int | None = None, num_warps: int | None = None,
) -> QuantizedNormedResidual:
    """`add_layernorm_triton` with the normed rows quantized in the same pass: h comes back as a new contiguous
    [rows, N] tensor in y's dtype, the rows as contiguous [rows, N] float8_e4m3fn values and [rows, 1] float32
    scales. block_rows and num_warps as for `add_layernorm_triton`."""
    h = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    values = torch.empty(y.shape, dtype=FP8_DTYPE, device=y.device)
    scale = torch.empty((y.shape[0], 1), dtype=torch.float32, device=y.device)
    _launch(y, residual, weight, bias, eps, h, values, scale, block_rows, num_warps)
    return QuantizedNormedResidual(h, QuantizedRows(values, scale))
