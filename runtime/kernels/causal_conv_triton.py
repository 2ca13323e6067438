"""Triton kernel of runtime.kernels.causal_conv's decode step for the released kernel width 4: one token of each row
against the three inputs its state slot holds, then SiLU; the slot shifts by one. One launch where plain torch takes
eight. Each channel's taps are read and written by the same thread, so the in-place shift needs no barrier."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_C = 512


@triton.jit
def _tap(v, w):
    """One product rounded to the activation dtype, as torch's half-precision multiply rounds it."""
    return (v.to(tl.float32) * w.to(tl.float32)).to(v.dtype).to(tl.float32)


@triton.jit
def _conv_decode_k4_kernel(x_ptr, w_ptr, state_ptr, slots_ptr, out_ptr, C, stride_x, stride_o, stride_s,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = c < C
    slot = tl.load(slots_ptr + row)
    st = state_ptr + slot * stride_s + c.to(tl.int64) * 3
    s0 = tl.load(st, mask=ok, other=0.0)
    s1 = tl.load(st + 1, mask=ok, other=0.0)
    s2 = tl.load(st + 2, mask=ok, other=0.0)
    x = tl.load(x_ptr + row * stride_x + c, mask=ok, other=0.0).to(s0.dtype)
    w = w_ptr + c * 4
    acc = _tap(s0, tl.load(w, mask=ok)) + _tap(s1, tl.load(w + 1, mask=ok)) + _tap(s2, tl.load(w + 2, mask=ok)) \
        + _tap(x, tl.load(w + 3, mask=ok))
    acc = acc.to(s0.dtype).to(tl.float32)  # the sum in the activation dtype, then SiLU
    tl.store(out_ptr + row * stride_o + c, (acc / (1.0 + tl.exp(-acc))).to(out_ptr.dtype.element_ty), mask=ok)
    tl.store(st, s1, mask=ok)
    tl.store(st + 1, s2, mask=ok)
    tl.store(st + 2, x, mask=ok)


def causal_conv_decode_triton(x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor,
                              slots: torch.Tensor) -> torch.Tensor:
    """x [B, C] (unit last stride); weight [C, 4] contiguous; conv_states [S, C, 3] with contiguous slots."""
    rows, channels = x.shape
    out = torch.empty(rows, channels, dtype=x.dtype, device=x.device)
    _conv_decode_k4_kernel[(rows, triton.cdiv(channels, BLOCK_C))](
        x, weight, conv_states, slots, out, channels, x.stride(0), out.stride(0), conv_states.stride(0),
        BLOCK=BLOCK_C, num_warps=4)
    return out
