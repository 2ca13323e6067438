"""Triton kernel for SnakeBeta on time-major `(B, T, C)` activations, with the next conv's left zero padding."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2


# lengths change with every chunk shape: specialising on them would only multiply compilations
@triton.jit(do_not_specialize=["rows", "T", "padded_T", "left_pad"])
def _snake_kernel(
    x_ptr, a_ptr, inv_b_ptr, out_ptr, rows, T, padded_T, C, left_pad,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)  # output rows b * padded_T + t
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    t = r % padded_T - left_pad
    src = (r // padded_T) * T + t
    in_row = (r < rows) & (t >= 0)
    col = c < C
    # pad rows load 0, and snake(0) = 0: the padding needs no branch
    x = tl.load(x_ptr + src[:, None] * C + c[None, :], mask=in_row[:, None] & col[None, :], other=0.0).to(tl.float32)
    a = tl.load(a_ptr + c, mask=col, other=0.0)[None, :]
    inv_b = tl.load(inv_b_ptr + c, mask=col, other=0.0)[None, :]
    s = tl.sin(x * a)
    y = x + inv_b * s * s
    tl.store(out_ptr + r[:, None] * C + c[None, :], y.to(out_ptr.dtype.element_ty),
             mask=(r < rows)[:, None] & col[None, :])  # fmt: skip


def snake_triton(x: torch.Tensor, a: torch.Tensor, inv_b: torch.Tensor, left_pad: int = 0) -> torch.Tensor:
    """`snake_reference` for contiguous x `(B, T, C)`: one read of x, one write of the padded output."""
    b, t, c = x.shape
    out = torch.empty(b, left_pad + t, c, device=x.device, dtype=x.dtype)
    rows = b * (left_pad + t)
    block_c = min(next_power_of_2(c), 128)
    block_r = max(4096 // block_c, 1)
    grid = (triton.cdiv(rows, block_r), triton.cdiv(c, block_c))
    _snake_kernel[grid](x, a, inv_b, out, rows, t, left_pad + t, c, left_pad, BLOCK_R=block_r, BLOCK_C=block_c,
                        num_warps=4)  # fmt: skip
    return out
