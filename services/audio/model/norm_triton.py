"""Triton kernel of the AuT layers: residual add (+ the fp16 clamp) and the next LayerNorm in one pass."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2


@triton.jit
def _add_layernorm_kernel(
    x_ptr, r_ptr, w_ptr, b_ptr, h_ptr, y_ptr, N, eps, clamp, stride_x, stride_r,
    CLAMP: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One row: h = x + r (clamped to +-clamp if CLAMP) rounded to the activation dtype, stored; then LayerNorm of
    the rounded h (fp32 statistics), as the model computes it from the stored residual."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    h = (tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
         + tl.load(r_ptr + row * stride_r + cols, mask=ok, other=0.0).to(tl.float32))
    if CLAMP:
        h = tl.minimum(tl.maximum(h, -clamp), clamp)
    h = h.to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + row * N + cols, h, mask=ok)
    hf = h.to(tl.float32)
    mean = tl.sum(hf, 0) / N
    centred = tl.where(ok, hf - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centred * centred, 0) / N + eps)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (centred * rstd * w + b).to(y_ptr.dtype.element_ty), mask=ok)


def add_layernorm_triton(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         eps: float, clamp: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual: [rows, N] with unit stride along N. Returns (h, layer_norm(h)), both new [rows, N]."""
    rows, n = x.shape
    assert x.stride(1) == 1 and residual.stride(1) == 1
    h = torch.empty_like(x, memory_format=torch.contiguous_format)
    y = torch.empty_like(h)
    _add_layernorm_kernel[(rows,)](
        x, residual, weight, bias, h, y, n, eps, 0.0 if clamp is None else clamp, x.stride(0), residual.stride(0),
        CLAMP=clamp is not None, BLOCK_N=next_power_of_2(n), num_warps=4,
    )
    return h, y
