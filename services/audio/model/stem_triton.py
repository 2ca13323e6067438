"""Triton kernels of the AuT conv stem: the 1-channel first conv with bias, GELU and the short-clip mask in one
pass, and bias + GELU (+ mask) in place on a cuDNN conv output. Both write channels-last [rows, C]."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2

SQRT_HALF = tl.constexpr(0.7071067811865476)
CONV1_BLOCK_ROWS = 64  # output positions per program
CONV1_BLOCK_CHANNELS = 128
BIAS_BLOCK_ROWS = 8


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.math.erf(x * SQRT_HALF))  # exact GELU, as nn.GELU()


@triton.jit
def _conv1_gelu_kernel(
    x_ptr, w_ptr, b_ptr, mask_ptr, y_ptr, num_rows, T1, F1, C, stride_xk, stride_xt, stride_w,
    HAS_MASK: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Program: BLOCK_R output positions (k, t, f) x BLOCK_C channels. The 3x3 windows are gathered as a
    [BLOCK_R, 16] tile (taps 9..15 zero) and multiplied with the [16, BLOCK_C] weights on tensor cores;
    y = gelu(acc + b) * mask[k, t]."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    taps = tl.arange(0, 16)
    r_ok = rows < num_rows
    c_ok = cols < C
    f = rows % F1
    kt = rows // F1  # k * T1 + t
    t = kt % T1
    k = kt // T1
    corner = k * stride_xk + 2 * t * stride_xt + 2 * f  # top-left of the 3x3 window in the padded image
    tap_offset = (taps // 3) * stride_xt + taps % 3
    windows = tl.load(x_ptr + corner[:, None] + tap_offset[None, :], mask=r_ok[:, None] & (taps < 9)[None, :],
                      other=0.0)  # [BLOCK_R, 16]
    w = tl.load(w_ptr + cols[None, :] * stride_w + taps[:, None], mask=c_ok[None, :], other=0.0)  # [16, BLOCK_C]
    acc = tl.dot(windows, w)  # fp32 accumulation, as the reference GEMM
    y = _gelu(acc + tl.load(b_ptr + cols, mask=c_ok, other=0.0).to(tl.float32)[None, :])
    if HAS_MASK:
        y = y * tl.load(mask_ptr + kt, mask=r_ok, other=0.0).to(tl.float32)[:, None]
    tl.store(y_ptr + rows[:, None] * C + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=r_ok[:, None] & c_ok[None, :])


@triton.jit
def _bias_gelu_kernel(
    x_ptr, b_ptr, mask_ptr, num_rows, C, F,
    HAS_MASK: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """In place on x [rows, C]: gelu(x + b) * mask[row // F] (row = (k * T + t) * F + f, the mask is per (k, t))."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    ok = (rows < num_rows)[:, None] & (cols < C)[None, :]
    ptrs = x_ptr + rows[:, None] * C + cols[None, :]
    x = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    y = _gelu(x + tl.load(b_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :])
    if HAS_MASK:
        y = y * tl.load(mask_ptr + rows // F, mask=rows < num_rows, other=0.0).to(tl.float32)[:, None]
    tl.store(ptrs, y.to(x_ptr.dtype.element_ty), mask=ok)


def conv1_gelu_triton(padded: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                      mask: torch.Tensor | None) -> torch.Tensor:
    """padded: [K, T + 2, F + 2] zero-bordered images (unit stride along F); weight: [C, 16] taps in (time, freq)
    order, 9..15 zero; mask: [K, ceil(T/2)] or None. Returns [K * ceil(T/2) * ceil(F/2), C]."""
    k, t2, f2 = padded.shape
    t1, f1 = (t2 - 1) // 2, (f2 - 1) // 2
    channels = weight.shape[0]
    assert padded.stride(2) == 1 and weight.shape[1] == 16 and weight.stride(1) == 1
    num_rows = k * t1 * f1
    out = padded.new_empty(num_rows, channels)
    grid = (triton.cdiv(num_rows, CONV1_BLOCK_ROWS), triton.cdiv(channels, CONV1_BLOCK_CHANNELS))
    _conv1_gelu_kernel[grid](
        padded, weight, bias, mask.contiguous() if mask is not None else bias, out, num_rows, t1, f1, channels,
        padded.stride(0), padded.stride(1), weight.stride(0),
        HAS_MASK=mask is not None, BLOCK_R=CONV1_BLOCK_ROWS, BLOCK_C=CONV1_BLOCK_CHANNELS, num_warps=4,
    )
    return out


def bias_gelu_triton(x: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """x: [K, C, T, F] in channels-last memory, updated in place and returned; mask: [K, T] or None."""
    k, channels, t, f = x.shape
    assert x.is_contiguous(memory_format=torch.channels_last)
    num_rows = k * t * f
    grid = (triton.cdiv(num_rows, BIAS_BLOCK_ROWS),)
    _bias_gelu_kernel[grid](
        x, bias, mask.contiguous() if mask is not None else bias, num_rows, channels, f,
        HAS_MASK=mask is not None, BLOCK_R=BIAS_BLOCK_ROWS, BLOCK_C=next_power_of_2(channels), num_warps=4,
    )
    return x
