"""Triton kernels of runtime.kernels.causal_conv.

Decode, for the released kernel width 4: one token of each row against the three inputs its state slot holds, then
SiLU; the slot shifts by one. One launch where plain torch takes eight. Each channel's taps are read and written by the
same thread, so the in-place shift needs no barrier.

Prefill: every prefill row of a step in one launch over tokens x channels, any kernel width. The plain-torch form
gathers, widens and multiplies the whole [Tp, C] input once per tap (~20 passes; 24 layers of an 8,192-token 9B step
spent ~90 ms of 322 there on the H200)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_C = 512
PREFILL_BLOCK_T, PREFILL_BLOCK_C = 32, 128


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


@triton.jit
def _conv_prefill_kernel(x_ptr, w_ptr, state_ptr, pos_ptr, slot_ptr, out_ptr, T, C, stride_x, stride_o, stride_s,
                         K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """A tile of tokens x channels. Tap j of a token `back = K-1-j` places into its row reads the token that many
    rows up in x, or, within the row's first K-1 tokens, the held input at window index pos + j. The slots are only
    read: the caller writes the new held inputs after this launch."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    t_ok, c_ok = t < T, c < C
    pos = tl.load(pos_ptr + t, mask=t_ok, other=0)
    slot = tl.load(slot_ptr + t, mask=t_ok, other=0)
    acc = tl.zeros([BLOCK_T, BLOCK_C], dtype=tl.float32)
    for j in tl.static_range(K):
        from_x = pos >= K - 1 - j
        xv = tl.load(x_ptr + (t - (K - 1 - j)).to(tl.int64)[:, None] * stride_x + c[None, :],
                     mask=(t_ok & from_x)[:, None] & c_ok[None, :], other=0.0)
        held = tl.load(state_ptr + slot.to(tl.int64)[:, None] * stride_s + c[None, :] * (K - 1) + (pos + j)[:, None],
                       mask=(t_ok & (pos < K - 1 - j))[:, None] & c_ok[None, :], other=0.0)
        w = tl.load(w_ptr + c * K + j, mask=c_ok, other=0.0).to(tl.float32)
        acc += tl.where(from_x[:, None], xv.to(tl.float32), held.to(tl.float32)) * w[None, :]  # exact products
    acc = acc.to(out_ptr.dtype.element_ty).to(tl.float32)  # the fp32 sum rounded once, then SiLU
    tl.store(out_ptr + t.to(tl.int64)[:, None] * stride_o + c[None, :],
             (acc / (1.0 + tl.exp(-acc))).to(out_ptr.dtype.element_ty), mask=t_ok[:, None] & c_ok[None, :])


def causal_conv_prefill_triton(x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor,
                               token_pos: torch.Tensor, token_slot: torch.Tensor) -> torch.Tensor:
    """x [Tp, C] (unit last stride) the prefill rows' tokens in packed order; weight [C, K] contiguous; conv_states
    [S, C, K-1] with contiguous slots, only read; token_pos / token_slot: int64 [Tp], each token's index within its
    row and its row's slot. -> SiLU(conv) [Tp, C] in x's dtype. One launch; plain torch takes ~20 per layer, each
    a pass over [Tp, C]."""
    tokens, channels = x.shape
    out = torch.empty(tokens, channels, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(tokens, PREFILL_BLOCK_T), triton.cdiv(channels, PREFILL_BLOCK_C))
    _conv_prefill_kernel[grid](x, weight, conv_states, token_pos, token_slot, out, tokens, channels, x.stride(0),
                               out.stride(0), conv_states.stride(0), K=weight.shape[1], BLOCK_T=PREFILL_BLOCK_T,
                               BLOCK_C=PREFILL_BLOCK_C, num_warps=4)
    return out
