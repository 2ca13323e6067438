"""Triton kernel of runtime.kernels.gated_rmsnorm: a block of head rows per program, one read of x and gate, one
write. The gate may be a view into a wider projection output (its token rows strided)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 16


@triton.jit
def _gated_rmsnorm_kernel(x_ptr, gate_ptr, w_ptr, out_ptr, num_rows, heads, gate_token_stride, eps,
                          D: tl.constexpr, ROWS: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)  # head rows: token * heads + head
    cols = tl.arange(0, D)
    ok = (rows < num_rows)[:, None]
    offsets = rows[:, None] * D + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=ok, other=0.0)
    gate_rows = (rows // heads) * gate_token_stride + (rows % heads) * D
    g = tl.load(gate_ptr + gate_rows[:, None] + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, 1) / D + eps)[:, None]
    normed = (xf * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)[None, :]
    scaled = (normed * w).to(x.dtype).to(tl.float32)  # weight * normed in the activation dtype, as the model does
    out = scaled * (g / (1.0 + tl.exp(-g)))
    tl.store(out_ptr + offsets, out.to(x.dtype), mask=ok)


def gated_rmsnorm_triton(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: contiguous [T, H, D], D a power of two; gate: [T, H, D] with its heads packed (strides (any, D, 1))."""
    tokens, heads, d = x.shape
    out = torch.empty_like(x)
    num_rows = tokens * heads
    _gated_rmsnorm_kernel[(triton.cdiv(num_rows, ROWS_PER_PROGRAM),)](
        x, gate, weight, out, num_rows, heads, gate.stride(0), eps, D=d, ROWS=ROWS_PER_PROGRAM, num_warps=4)
    return out
