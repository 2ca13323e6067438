"""Triton kernel of runtime.kernels.deltanet_gates: one program per token row, every value head at once."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.deltanet_gates import Gates

SOFTPLUS_LINEAR_ABOVE = 20.0  # softplus(x) = x past here, as torch's default threshold has it


@triton.jit
def _gates_kernel(a_ptr, b_ptr, a_log_ptr, dt_bias_ptr, g_ptr, beta_ptr, heads, stride_a, stride_b,
                  LINEAR_ABOVE: tl.constexpr, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    ok = h < heads
    # torch adds the half-precision bias to fp32 a in fp32; exp(A_log) rounds A_log to fp32 first: same here
    x = tl.load(a_ptr + row * stride_a + h, mask=ok, other=0.0).to(tl.float32) \
        + tl.load(dt_bias_ptr + h, mask=ok, other=0.0).to(tl.float32)
    softplus = tl.where(x > LINEAR_ABOVE, x, tl.log(1.0 + tl.exp(tl.minimum(x, LINEAR_ABOVE))))
    decay = tl.exp(tl.load(a_log_ptr + h, mask=ok, other=0.0).to(tl.float32))
    tl.store(g_ptr + row * heads + h, -decay * softplus, mask=ok)
    b = tl.load(b_ptr + row * stride_b + h, mask=ok, other=0.0).to(tl.float32)
    tl.store(beta_ptr + row * heads + h, (1.0 / (1.0 + tl.exp(-b))).to(beta_ptr.dtype.element_ty), mask=ok)


def deltanet_gates_triton(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor) -> Gates:
    rows, heads = a.shape
    g = torch.empty(rows, heads, dtype=torch.float32, device=a.device)
    beta = torch.empty(rows, heads, dtype=b.dtype, device=b.device)
    _gates_kernel[(rows,)](a, b, a_log, dt_bias, g, beta, heads, a.stride(0), b.stride(0),
                           LINEAR_ABOVE=SOFTPLUS_LINEAR_ABOVE, BLOCK_H=next_power_of_2(heads), num_warps=1)
    return Gates(g, beta)
