"""Triton kernel for SnakeBeta on channels-first `(B, C, T)` activations, with the next conv's left zero padding."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2


# lengths change with every chunk shape: specialising on them would only multiply compilations
@triton.jit(do_not_specialize=["rows", "T", "padded_T", "row_stride", "left_pad"])
def _snake_kernel(
    x_ptr, a_ptr, inv_b_ptr, out_ptr, rows, C, T, padded_T, row_stride, left_pad,
    BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)  # rows b * C + c, one channel each
    t_out = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    t = t_out - left_pad
    in_row = r < rows
    a = tl.load(a_ptr + r % C, mask=in_row, other=0.0)[:, None]
    inv_b = tl.load(inv_b_ptr + r % C, mask=in_row, other=0.0)[:, None]
    # pad columns load 0, and snake(0) = 0: the padding needs no branch
    in_x = in_row[:, None] & ((t >= 0) & (t < T))[None, :]
    x = tl.load(x_ptr + r[:, None] * row_stride + t[None, :], mask=in_x, other=0.0).to(tl.float32)
    s = tl.sin(x * a)
    y = x + inv_b * s * s
    tl.store(out_ptr + r[:, None] * padded_T + t_out[None, :], y.to(out_ptr.dtype.element_ty),
             mask=in_row[:, None] & (t_out < padded_T)[None, :])  # fmt: skip


def snake_triton(x: torch.Tensor, a: torch.Tensor, inv_b: torch.Tensor, left_pad: int = 0) -> torch.Tensor:
    """`snake_reference` for x `(B, C, T)` whose rows are contiguous at one stride (`rows_uniform`): one read of
    x, one write of the padded output, which is contiguous."""
    b, c, t = x.shape
    out = torch.empty(b, c, left_pad + t, device=x.device, dtype=x.dtype)
    rows, padded_t = b * c, left_pad + t
    block_t = min(next_power_of_2(padded_t), 1024)
    block_r = max(2048 // block_t, 1)
    # time blocks on the grid's second axis (at most 65535): 64M samples a row, far past any chunk
    grid = (triton.cdiv(rows, block_r), triton.cdiv(padded_t, block_t))
    _snake_kernel[grid](x, a, inv_b, out, rows, c, t, padded_t, x.stride(1), left_pad, BLOCK_R=block_r,
                        BLOCK_T=block_t, num_warps=4)  # fmt: skip
    return out
