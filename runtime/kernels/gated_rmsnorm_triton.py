"""Triton kernel of runtime.kernels.gated_rmsnorm: a block of head rows per program, one read of x and gate, one
write."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 16


@triton.jit
def _gated_rmsnorm_kernel(x_ptr, gate_ptr, w_ptr, out_ptr, num_rows, eps, D: tl.constexpr, ROWS: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, D)
    ok = (rows < num_rows)[:, None]
    offsets = rows[:, None] * D + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=ok, other=0.0)
    g = tl.load(gate_ptr + offsets, mask=ok, other=0.0).to(tl.float32)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, 1) / D + eps)[:, None]
    normed = (xf * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)[None, :]
    scaled = (normed * w).to(x.dtype).to(tl.float32)  # weight * normed in the activation dtype, as the model does
    out = scaled * (g / (1.0 + tl.exp(-g)))
    tl.store(out_ptr + offsets, out.to(x.dtype), mask=ok)


def gated_rmsnorm_triton(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x, gate: contiguous [..., D], D a power of two."""
    d = x.shape[-1]
    num_rows = x.numel() // d
    out = torch.empty_like(x)
    _gated_rmsnorm_kernel[(triton.cdiv(num_rows, ROWS_PER_PROGRAM),)](
        x, gate, weight, out, num_rows, eps, D=d, ROWS=ROWS_PER_PROGRAM, num_warps=4)
    return out
