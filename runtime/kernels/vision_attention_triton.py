"""Triton kernel: non-causal flash attention inside each segment of packed vision patches, head dim split in two tiles.

cuDNN and FlashAttention round a head dim of 72 up to a 128-wide tile; here q·kᵀ and p·v run over a power-of-two
main tile (64) plus a 16-wide tail whose lanes past the head dim are masked, so 72 costs 80 lanes of MMA, not 128.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2

LOG2E = 1.4426950408889634
MIN_TILE = 16  # tl.dot's smallest K and N


class AttentionTile(NamedTuple):
    """One launch shape: query rows and keys per step of a program, warps, and the K/V pipeline depth."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


# Hopper start: two warpgroups of 64 query rows each (wgmma's M), 64 keys per step, a 3-stage K/V load pipeline.
DEFAULT_TILE = AttentionTile(128, 64, 8, 3)
# What bench/vision/bench_vision_attention.py sweeps against the default.
SWEEP_TILES = (
    DEFAULT_TILE,
    AttentionTile(128, 64, 4, 3),
    AttentionTile(128, 128, 8, 2),
    AttentionTile(64, 64, 4, 3),
    AttentionTile(64, 128, 4, 2),
)


class HeadSplit(NamedTuple):
    """head_dim = main + the used lanes of the tail tile; tail is 0 when main covers the head dim."""

    main: int
    tail: int


def split_head_dim(head_dim: int) -> HeadSplit:
    """The largest power of two <= head_dim as the main tile; what is left in a power-of-two tail of >= 16 lanes."""
    main = 1 << (head_dim.bit_length() - 1)
    rest = head_dim - main
    return HeadSplit(main, max(MIN_TILE, next_power_of_2(rest)) if rest else 0)


@triton.jit
def _row_ptrs(base, rows, stride, cols):
    """Pointers to a [len(rows), len(cols)] tile of a [tokens, ...] tensor whose row `r` starts at base + r·stride."""
    return base + rows[:, None] * stride + cols[None, :]


@triton.jit
def _load_keys(base, keys, stride, cols, key_ok, col_ok, MASK_KEYS: tl.constexpr, MASK_COLS: tl.constexpr):
    """A K or V tile; only the segment's partial last key block and a tail tile's padded lanes pay for a mask."""
    ptrs = _row_ptrs(base, keys, stride, cols)
    if MASK_KEYS and MASK_COLS:
        return tl.load(ptrs, mask=key_ok & col_ok, other=0.0)
    elif MASK_KEYS:
        return tl.load(ptrs, mask=key_ok, other=0.0)
    elif MASK_COLS:
        return tl.load(ptrs, mask=col_ok, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def _attend_keys(
    q_main, q_tail, acc_main, acc_tail, m_i, l_i, k_seg, v_seg, stride_kt, stride_vt, first_key, seqlen, qk_scale,
    HEAD_DIM: tl.constexpr, MAIN: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr,
    BLOCK_N: tl.constexpr, MASK_KEYS: tl.constexpr,
):
    """One online-softmax step over keys [first_key, first_key + BLOCK_N) of the segment. Softmax runs in base 2
    with the scale folded into qk_scale; m_i and l_i are the rows' running max (scaled) and sum."""
    keys = first_key + tl.arange(0, BLOCK_N)
    key_ok = (keys < seqlen)[:, None]
    cols_main = tl.arange(0, MAIN)
    cols_tail = MAIN + tl.arange(0, TAIL)
    tail_ok = (cols_tail < HEAD_DIM)[None, :]
    PADDED: tl.constexpr = MAIN + TAIL > HEAD_DIM
    k_main = _load_keys(k_seg, keys, stride_kt, cols_main, key_ok, tail_ok, MASK_KEYS, False)
    s = tl.dot(q_main, tl.trans(k_main))  # [BLOCK_M, BLOCK_N] fp32
    if HAS_TAIL:
        k_tail = _load_keys(k_seg, keys, stride_kt, cols_tail, key_ok, tail_ok, MASK_KEYS, PADDED)
        s = tl.dot(q_tail, tl.trans(k_tail), s)
    if MASK_KEYS:
        s = tl.where((keys < seqlen)[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)  # rescales what earlier key blocks summed; 0 on the first block
    l_i = l_i * alpha + tl.sum(p, 1)
    v_main = _load_keys(v_seg, keys, stride_vt, cols_main, key_ok, tail_ok, MASK_KEYS, False)
    p = p.to(v_main.dtype)
    acc_main = tl.dot(p, v_main, acc_main * alpha[:, None])
    if HAS_TAIL:
        v_tail = _load_keys(v_seg, keys, stride_vt, cols_tail, key_ok, tail_ok, MASK_KEYS, PADDED)
        acc_tail = tl.dot(p, v_tail, acc_tail * alpha[:, None])
    return acc_main, acc_tail, m_new, l_i


@triton.jit
def _vision_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, cu_seqlens_ptr, qk_scale, stride_qt, stride_kt, stride_vt,
    STRIDE_QH: tl.constexpr, STRIDE_KH: tl.constexpr, STRIDE_VH: tl.constexpr, NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr, MAIN: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program: BLOCK_M query rows of one head of one segment against all of that segment's keys.

    Head strides are compile-time (the head dim, in every tensor the tower passes): a constant lets the compiler
    prove each row's 16-byte alignment and vectorise the loads; token strides stay runtime arguments."""
    m_block = tl.program_id(0)
    head = tl.program_id(1)
    segment = tl.program_id(2)
    start = tl.load(cu_seqlens_ptr + segment).to(tl.int64)
    seqlen = (tl.load(cu_seqlens_ptr + segment + 1) - start).to(tl.int32)
    if m_block * BLOCK_M >= seqlen:  # the grid covers the longest segment; shorter ones leave programs idle
        return
    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = (rows < seqlen)[:, None]
    cols_main = tl.arange(0, MAIN)
    cols_tail = MAIN + tl.arange(0, TAIL)
    tail_ok = (cols_tail < HEAD_DIM)[None, :]
    q_seg = q_ptr + start * stride_qt + head * STRIDE_QH
    k_seg = k_ptr + start * stride_kt + head * STRIDE_KH
    v_seg = v_ptr + start * stride_vt + head * STRIDE_VH
    q_main = tl.load(_row_ptrs(q_seg, rows, stride_qt, cols_main), mask=row_ok, other=0.0)  # past the end: 0
    q_tail = tl.load(_row_ptrs(q_seg, rows, stride_qt, cols_tail), mask=row_ok & tail_ok, other=0.0)
    acc_main = tl.zeros([BLOCK_M, MAIN], dtype=tl.float32)
    acc_tail = tl.zeros([BLOCK_M, TAIL], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    full_keys = seqlen // BLOCK_N * BLOCK_N
    for first_key in range(0, full_keys, BLOCK_N):
        acc_main, acc_tail, m_i, l_i = _attend_keys(
            q_main, q_tail, acc_main, acc_tail, m_i, l_i, k_seg, v_seg, stride_kt, stride_vt, first_key, seqlen,
            qk_scale, HEAD_DIM, MAIN, TAIL, HAS_TAIL, BLOCK_N, False,
        )
    if full_keys < seqlen:
        acc_main, acc_tail, m_i, l_i = _attend_keys(
            q_main, q_tail, acc_main, acc_tail, m_i, l_i, k_seg, v_seg, stride_kt, stride_vt, full_keys, seqlen,
            qk_scale, HEAD_DIM, MAIN, TAIL, HAS_TAIL, BLOCK_N, True,
        )
    inv_l = (1.0 / l_i)[:, None]  # every row saw >= 1 key, so l_i > 0
    out_seg = out_ptr + start * (NUM_HEADS * HEAD_DIM) + head * HEAD_DIM
    out_offsets = rows[:, None] * (NUM_HEADS * HEAD_DIM)
    out_dtype = out_ptr.dtype.element_ty
    tl.store(out_seg + out_offsets + cols_main[None, :], (acc_main * inv_l).to(out_dtype), mask=row_ok)
    if HAS_TAIL:
        tl.store(out_seg + out_offsets + cols_tail[None, :], (acc_tail * inv_l).to(out_dtype), mask=row_ok & tail_ok)


def vision_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
    tile: AttentionTile = DEFAULT_TILE,
) -> torch.Tensor:
    """Attention of q, k, v [N, H, D] (token-strided views are read in place; each head's D lanes contiguous) inside
    each segment [cu_seqlens[i], cu_seqlens[i+1]); returns a contiguous [N, H, D] in q's dtype.

    Inputs are checked by `runtime.kernels.vision_attention.vision_attention`. `max_seqlen` must be at least the
    longest segment (the plan's, a host int): rows past max_seqlen of a longer segment would never be written.
    """
    num_tokens, num_heads, head_dim = q.shape
    out = torch.empty((num_tokens, num_heads, head_dim), dtype=q.dtype, device=q.device)
    num_segments = cu_seqlens.shape[0] - 1
    if num_tokens == 0 or num_segments == 0 or max_seqlen == 0:
        return out
    split = split_head_dim(head_dim)
    grid = (triton.cdiv(max_seqlen, tile.block_m), num_heads, num_segments)
    _vision_attention_kernel[grid](
        q, k, v, out, cu_seqlens, head_dim**-0.5 * LOG2E, q.stride(0), k.stride(0), v.stride(0),
        STRIDE_QH=q.stride(1), STRIDE_KH=k.stride(1), STRIDE_VH=v.stride(1), NUM_HEADS=num_heads,
        HEAD_DIM=head_dim, MAIN=split.main, TAIL=split.tail or MIN_TILE, HAS_TAIL=split.tail > 0,
        BLOCK_M=tile.block_m, BLOCK_N=tile.block_n, num_warps=tile.num_warps, num_stages=tile.num_stages,
    )
    return out

