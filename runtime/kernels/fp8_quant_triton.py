"""Triton kernel: per-row FP8 e4m3 quantization in one pass (row amax, scale, e4m3 store), optionally after GELU."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.fp8_quant import FP8_DTYPE, FP8_MAX, MIN_AMAX, QuantizedRows

TILE_ELEMENTS = 2048  # elements per program at least: narrow rows share one, wide rows (4304) take one alone
ELEMENTS_PER_THREAD = 32  # H200 sweep (bench/vision/sweep_fp8_quant.py): 1.1-1.3x faster than 16 at 1,152 and 4,304
MAX_WARPS = 16
# the jitted kernel reads module globals only as constexprs
GELU_COEFF = tl.constexpr(1.5957691216057308)  # 2·sqrt(2/π): GELU's tanh form as x·sigmoid(2u)
E4M3_MAX = tl.constexpr(FP8_MAX)
AMAX_FLOOR = tl.constexpr(MIN_AMAX)


@triton.jit
def row_scales(amax):
    """(scale, inverse) of rows whose largest magnitude is `amax` [ROWS] float32, floored as the reference floors it:
    IEEE-rounded divisions (Triton's `/` is approximate), so both equal the reference's bit for bit."""
    amax = tl.maximum(amax, AMAX_FLOOR)
    return tl.math.div_rn(amax, E4M3_MAX), tl.math.div_rn(tl.full(amax.shape, E4M3_MAX, tl.float32), amax)


@triton.jit
def to_e4m3(x, inverse):
    """x [ROWS, K] float32 scaled by its rows' `inverse`, saturated at ±448: store it into an e4m3 tensor (the cast
    rounds to nearest even)."""
    return tl.clamp(x * inverse[:, None], -E4M3_MAX, E4M3_MAX)


# GELU's tanh form, three ways (timed by bench/vision/sweep_fp8_quant.py; H200, 47,040 x 4,304 bf16 rows: 278, 204
# and 163 us, where the pass without GELU takes 157):
# "exp": x·sigmoid(2u) through exp and a division, two MUFU ops an element, within float32 rounding of torch's;
# "approx": 0.5·x·(1 + tanh(u)) with PTX tanh.approx.f32, one MUFU op (tanh to ~2^-11);
# "approx_bf16x2": the same in bf16 on packed pairs, one MUFU op per two elements (bf16 inputs only). Its GELU is
# off by up to ~2^-9 of |x|: far under e4m3's step wherever a row's top is a positive output, as in any real fc1
# row; only in the negative tail (x < -2, outputs under 0.05) is that a large part of the tiny value itself.
GELU_FORMS = ("exp", "approx", "approx_bf16x2")
GELU_FORM = "approx_bf16x2"

_TANH_F32 = tl.constexpr("tanh.approx.f32 $0, $1;")
# u = x·(c0 + c0·0.044715·x²) with c0 = sqrt(2/π); GELU = h + h·tanh(u) with h = x/2. The bf16 constants 0x3F4C
# (0.797), 0x3D12 (0.0356) and 0x3F00 (0.5) are packed twice into 32 bits, one per lane of the pair.
_GELU_BF16X2 = tl.constexpr("""{
.reg .b32 a, h, c0, c1, half;
mov.b32 c0, 0x3F4C3F4C;
mov.b32 c1, 0x3D123D12;
mov.b32 half, 0x3F003F00;
mul.rn.bf16x2 a, $1, $1;
fma.rn.bf16x2 a, a, c1, c0;
mul.rn.bf16x2 a, a, $1;
tanh.approx.bf16x2 a, a;
mul.rn.bf16x2 h, $1, half;
fma.rn.bf16x2 $0, h, a, h;
}""")


@triton.jit
def _gelu_tanh(x, GELU: tl.constexpr):
    """GELU (tanh form) of a tile as `GELU` names it (see GELU_FORMS); x in its storage dtype, float32 out."""
    if GELU == "approx_bf16x2":
        x = tl.inline_asm_elementwise(_GELU_BF16X2, "=r,r", [x], dtype=tl.bfloat16, is_pure=True, pack=2)
        return x.to(tl.float32)
    x = x.to(tl.float32)
    if GELU == "approx":
        u = 0.7978845608028654 * x + 0.035677408136300125 * x * x * x
        t = tl.inline_asm_elementwise(_TANH_F32, "=f,f", [u], dtype=tl.float32, is_pure=True, pack=1)
        h = 0.5 * x
        return h + h * t
    # 0.5·x·(1 + tanh(u)) == x·sigmoid(2u), u = sqrt(2/π)·(x + 0.044715·x³): exp overflowing to inf for very
    # negative x gives x / inf = -0, the limit
    return x / (1.0 + tl.exp(-GELU_COEFF * (x + 0.044715 * x * x * x)))


@triton.jit
def _load_tile(x_ptr, rows, row_ok, cols, K, stride_x, GELU: tl.constexpr):
    """A tile of rows in float32, through GELU unless `GELU` is "": padded columns stay 0 (GELU(0) = 0 in every
    form) and leave the amax alone."""
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols, mask=row_ok[:, None] & (cols < K), other=0.0)
    if GELU == "":
        return x.to(tl.float32)
    return _gelu_tanh(x, GELU)


@triton.jit
def _quantize_rows_kernel(
    x_ptr, q_ptr, scale_ptr, num_rows, K, stride_x,
    BLOCK_ROWS: tl.constexpr, MAIN_K: tl.constexpr, TAIL_K: tl.constexpr, GELU: tl.constexpr,
):
    """BLOCK_ROWS whole rows per program: the row stays in registers between its amax and its quantization, so x is
    read from memory once. A row is a power-of-two MAIN_K tile plus a TAIL_K tile for what is left (0: none), so a
    4,304-wide row takes 4,096 + 256 lanes instead of 8,192 (the GELU's arithmetic runs on every lane)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < num_rows
    cols = tl.arange(0, MAIN_K)[None, :]
    x = _load_tile(x_ptr, rows, row_ok, cols, K, stride_x, GELU)
    amax = tl.max(tl.abs(x), axis=1)  # [BLOCK_ROWS]; max is exact in any order
    if TAIL_K > 0:
        tail_cols = MAIN_K + tl.arange(0, TAIL_K)[None, :]
        tail = _load_tile(x_ptr, rows, row_ok, tail_cols, K, stride_x, GELU)
        amax = tl.maximum(amax, tl.max(tl.abs(tail), axis=1))
    scale, inverse = row_scales(amax)
    out = q_ptr + rows[:, None] * K
    tl.store(out + cols, to_e4m3(x, inverse).to(q_ptr.dtype.element_ty), mask=row_ok[:, None] & (cols < K))
    if TAIL_K > 0:
        tl.store(out + tail_cols, to_e4m3(tail, inverse).to(q_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & (tail_cols < K))
    tl.store(scale_ptr + rows, scale, mask=row_ok)


def quantize_rows_triton(x: torch.Tensor, gelu_tanh: bool = False, block_rows: int | None = None,
                         gelu_form: str | None = None) -> QuantizedRows:
    """`quantize_rows_reference` in one launch. x [M, K] with unit stride along K (any row stride); values come back
    as a new contiguous [M, K] float8_e4m3fn tensor, scales as [M, 1] float32.

    block_rows overrides the rows per program (by default as many whole rows as fill 2048 elements): the interpreter
    test uses it to leave the last program part-filled. gelu_form overrides GELU_FORM (the interpreter runs "exp"
    only: it has no PTX).
    """
    rows, k = x.shape
    gelu_form = gelu_form or GELU_FORM
    assert gelu_form in GELU_FORMS, gelu_form
    if gelu_form == "approx_bf16x2" and x.dtype != torch.bfloat16:
        gelu_form = "approx"
    assert x.stride(1) == 1, "rows must be contiguous along K"
    values = torch.empty((rows, k), dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    if rows == 0:
        return QuantizedRows(values, scale)
    main_k = next_power_of_2(k) if k < 64 else 1 << (k.bit_length() - 1)  # narrow rows: one padded tile
    tail_k = next_power_of_2(k - main_k) if k > main_k else 0
    lanes = main_k + tail_k
    block_rows = block_rows or 1 << (max(1, TILE_ELEMENTS // lanes).bit_length() - 1)  # a power of two
    num_warps = min(max(block_rows * main_k // (32 * ELEMENTS_PER_THREAD), 1), MAX_WARPS)
    _quantize_rows_kernel[(triton.cdiv(rows, block_rows),)](
        x, values, scale, rows, k, x.stride(0),
        BLOCK_ROWS=block_rows, MAIN_K=main_k, TAIL_K=tail_k, GELU=gelu_form if gelu_tanh else "",
        num_warps=num_warps,
    )
    return QuantizedRows(values, scale)
