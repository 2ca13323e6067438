"""Triton silu(gate) * up over a [T, 2I] fused gate/up output."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels.pdl import pdl_args, pdl_enter


@triton.jit
def _silu_mul_kernel(x_ptr, out_ptr, width, stride_x, stride_o, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """One program: BLOCK columns of one token. silu is rounded to the input dtype before the multiply, as the
    unfused model rounds F.silu(gate) before `* up`."""
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < width
    gate = tl.load(x_ptr + t * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + t * stride_x + width + cols, mask=ok, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + t * stride_o + cols, (act * up).to(out_ptr.dtype.element_ty), mask=ok)


def silu_mul_triton(gate_up: torch.Tensor) -> torch.Tensor:
    tokens, double = gate_up.shape
    width = double // 2
    out = torch.empty(tokens, width, dtype=gate_up.dtype, device=gate_up.device)
    block = min(1024, triton.next_power_of_2(width))
    _silu_mul_kernel[(tokens, triton.cdiv(width, block))](
        gate_up, out, width, gate_up.stride(0), out.stride(0), BLOCK=block, num_warps=4, **pdl_args(gate_up),
    )
    return out
