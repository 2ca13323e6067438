"""Triton kernel: per-row FP8 e4m3 quantization in one pass (row amax, scale, e4m3 store), optionally after GELU."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.fp8_quant import FP8_DTYPE, FP8_MAX, MIN_AMAX, QuantizedRows

TILE_ELEMENTS = 2048  # elements per program at least: narrow rows share one, wide rows (4304 -> 8192) take one alone
ELEMENTS_PER_THREAD = 16  # two 16-byte vectors of bf16 per thread: enough loads in flight, few registers
MAX_WARPS = 16
# the jitted kernel reads module globals only as constexprs
GELU_COEFF = tl.constexpr(1.5957691216057308)  # 2·sqrt(2/π): GELU's tanh form as x·sigmoid(2u)
E4M3_MAX = tl.constexpr(FP8_MAX)
AMAX_FLOOR = tl.constexpr(MIN_AMAX)


@triton.jit
def _quantize_rows_kernel(
    x_ptr, q_ptr, scale_ptr, num_rows, K, stride_x,
    BLOCK_ROWS: tl.constexpr, BLOCK_K: tl.constexpr, GELU_TANH: tl.constexpr,
):
    """BLOCK_ROWS whole rows per program: the row stays in registers between its amax and its quantization, so x is
    read from memory once."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < num_rows
    cols = tl.arange(0, BLOCK_K)[None, :]
    mask = row_ok[:, None] & (cols < K)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if GELU_TANH:
        # 0.5·x·(1 + tanh(u)) == x·sigmoid(2u), u = sqrt(2/π)·(x + 0.044715·x³): exp overflowing to inf for very
        # negative x gives x / inf = -0, the limit; padded columns stay 0 (GELU(0) = 0) and leave the amax alone
        x = x / (1.0 + tl.exp(-GELU_COEFF * (x + 0.044715 * x * x * x)))
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), AMAX_FLOOR)  # [BLOCK_ROWS]; max is exact in any order
    # IEEE-rounded divisions (Triton's `/` is approximate) so scale and inverse equal the reference's bit for bit
    scale = tl.math.div_rn(amax, E4M3_MAX)
    inverse = tl.math.div_rn(tl.full(amax.shape, E4M3_MAX, tl.float32), amax)
    q = tl.clamp(x * inverse[:, None], -E4M3_MAX, E4M3_MAX)
    tl.store(q_ptr + rows[:, None] * K + cols, q.to(q_ptr.dtype.element_ty), mask=mask)  # round to nearest even
    tl.store(scale_ptr + rows, scale, mask=row_ok)


def quantize_rows_triton(x: torch.Tensor, gelu_tanh: bool = False, block_rows: int | None = None) -> QuantizedRows:
    """`quantize_rows_reference` in one launch. x [M, K] with unit stride along K (any row stride); values come back
    as a new contiguous [M, K] float8_e4m3fn tensor, scales as [M, 1] float32.

    block_rows overrides the rows per program (by default as many whole rows as fill 2048 elements): the interpreter
    test uses it to leave the last program part-filled.
    """
    rows, k = x.shape
    assert x.stride(1) == 1, "rows must be contiguous along K"
    values = torch.empty((rows, k), dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows == 0:
        return QuantizedRows(values, scale)
    block_k = next_power_of_2(k)
    block_rows = block_rows or max(1, TILE_ELEMENTS // block_k)
    num_warps = min(max(block_rows * block_k // (32 * ELEMENTS_PER_THREAD), 1), MAX_WARPS)
    _quantize_rows_kernel[(triton.cdiv(rows, block_rows),)](
        x, values, scale, rows, k, x.stride(0),
        BLOCK_ROWS=block_rows, BLOCK_K=block_k, GELU_TANH=gelu_tanh, num_warps=num_warps,
    )
    return QuantizedRows(values, scale)
