"""Triton attention over a paged KV cache: packed varlen queries (prefill, chunks, decode rows), GQA, KV splits."""
from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.pdl import pdl_args, pdl_enter

LOG2E = 1.4426950408889634


@triton.jit
def _store_partial(
    part_out_ptr, part_lse_ptr, o, m_i, l_i, split, q_idx, head, row_ok, num_q_tokens, num_q_heads,
    HEAD_DIM: tl.constexpr,
):
    """One split's rows: partials are [NUM_SPLITS, Tq, Hq, D] and [NUM_SPLITS, Tq, Hq], contiguous; lse in base 2."""
    lse_idx = (split * num_q_tokens + q_idx) * num_q_heads + head
    lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i)))
    tl.store(part_lse_ptr + lse_idx, lse, mask=row_ok)
    tl.store(part_out_ptr + lse_idx[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :], o, mask=row_ok[:, None])


# one compile for every batch size and block-table width (Triton would specialise each on being 1 or a multiple of 16)
@triton.jit(do_not_specialize=["num_q_tokens", "stride_bt"])
def _paged_attn_kernel(
    q_ptr, k_ptr, v_ptr, block_tables_ptr, kv_lens_ptr, cu_q_ptr,
    out_ptr, part_out_ptr, part_lse_ptr,
    scale_log2,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_ot, stride_oh,
    num_q_tokens, num_q_heads,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, MIN_SPLIT_KEYS: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program: BLOCK_Q query tokens x the GROUP query heads of one KV head (so K/V load once for the group),
    over one split of the visible keys. Rows r of the tile are (token r // GROUP, head r % GROUP).

    Splits are chunks of >= MIN_SPLIT_KEYS keys, so a short sequence fills fewer than NUM_SPLITS of them; every
    split writes partials (an empty one an lse of -inf) for `_merge_splits_kernel`. Merging inside this kernel (the
    last split to arrive merges) was measured slower on the H200 at every length past one split: its registers
    (168 vs 107) cut occupancy and the merging program runs after all the others (bench/kernels/NOTES.md)."""
    pdl_enter(PDL)
    pid_q = tl.program_id(0)
    seq = tl.program_id(1)
    kv_head = tl.program_id(2) // NUM_SPLITS
    split = tl.program_id(2) % NUM_SPLITS
    q_start = tl.load(cu_q_ptr + seq)
    q_len = tl.load(cu_q_ptr + seq + 1) - q_start
    if pid_q * BLOCK_Q >= q_len:
        return
    kv_len = tl.load(kv_lens_ptr + seq)
    r = tl.arange(0, ROWS)
    tok = pid_q * BLOCK_Q + r // GROUP  # token within the sequence
    head = kv_head * GROUP + r % GROUP
    row_ok = (r < BLOCK_Q * GROUP) & (tok < q_len)
    visible = kv_len - q_len + tl.minimum((pid_q + 1) * BLOCK_Q, q_len)  # keys the tile's last token sees
    chunk = tl.maximum(tl.cdiv(tl.cdiv(visible, NUM_SPLITS), BLOCK_N) * BLOCK_N, MIN_SPLIT_KEYS)
    d = tl.arange(0, HEAD_DIM)
    q_rows = (q_start + tok).to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + d[None, :], mask=row_ok[:, None], other=0.0)
    q_pos = kv_len - q_len + tok  # each row sees keys at positions <= q_pos
    lo = split * chunk
    hi = tl.minimum(visible, lo + chunk)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        block = tl.load(table + n // BLOCK_SIZE, mask=n_ok, other=0).to(tl.int64)
        kv_rows = block * stride_kb + (n % BLOCK_SIZE) * stride_ks + kv_head * stride_kh  # [BLOCK_N]
        k = tl.load(k_ptr + kv_rows[None, :] + d[:, None], mask=n_ok[None, :], other=0.0)  # [D, BLOCK_N]
        s = tl.dot(q, k) * scale_log2
        s = tl.where(n_ok[None, :] & (n[None, :] <= q_pos[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet stays empty
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + kv_rows[:, None] + d[None, :], mask=n_ok[:, None], other=0.0)  # [BLOCK_N, D]
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    q_idx = (q_start + tok).to(tl.int64)
    out_ptrs = out_ptr + (q_idx * stride_ot + head * stride_oh)[:, None] + d[None, :]
    if NUM_SPLITS == 1:
        tl.store(out_ptrs, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        _store_partial(part_out_ptr, part_lse_ptr, o, m_i, l_i, split, q_idx, head, row_ok, num_q_tokens,
                       num_q_heads, HEAD_DIM)


@triton.jit(do_not_specialize=["num_q_tokens"])
def _merge_splits_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, num_q_tokens, num_q_heads, stride_ot, stride_oh,
    NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PDL: tl.constexpr,
):
    """Combine one (token, head)'s split partials by their log-sum-exp weights."""
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    idx = (s * num_q_tokens + t) * num_q_heads + h
    lse = tl.load(part_lse_ptr + idx, mask=s < NUM_SPLITS, other=float("-inf"))
    m = tl.max(lse, 0)
    w = tl.exp2(lse - m)
    o = tl.load(part_out_ptr + idx[:, None] * HEAD_DIM + d[None, :], mask=(s < NUM_SPLITS)[:, None], other=0.0)
    o = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
    tl.store(out_ptr + t * stride_ot + h * stride_oh + d, o.to(out_ptr.dtype.element_ty))


@functools.cache
def num_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count if torch.cuda.is_available() else 132


def choose_splits(programs: int, max_kv: int, sms: int) -> int:
    """Split the keys when too few programs would fill the GPU (small decode batches), >= 256 keys per split."""
    return max(1, min(triton.cdiv(2 * sms, programs), triton.cdiv(max_kv, 256), 32))


BLOCK_N = 64  # keys per inner step
MIN_SPLIT_KEYS = 64  # a split takes at least this many keys (a multiple of BLOCK_N); fewer splits fill short sequences
# Multi-token tiles (prefill, chunks, mixed steps) run eagerly, outside CUDA graphs, so every split count is a compile
# on the step that first meets it (seconds, stalling every running row): they take powers of two only, which
# `compile_prefill_variants` compiles at start. Decode graphs keep choose_splits' exact count, fixed at capture.
PREFILL_SPLITS = (1, 2, 4, 8, 16, 32)


def split_count(block_q: int, programs: int, max_kv: int, sms: int) -> int:
    """choose_splits for one-token tiles; for multi-token tiles the largest of PREFILL_SPLITS not above it."""
    splits = choose_splits(programs, max_kv, sms)
    return splits if block_q == 1 else 1 << (splits.bit_length() - 1)


def paged_attention_triton(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    kv_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    max_seqlen_q: int,
    scale: float | None = None,
    num_splits: int | None = None,
    min_split_keys: int = MIN_SPLIT_KEYS,
) -> torch.Tensor:
    """`paged_attention_reference` in Triton; max_seqlen_q (host int, >= every q_len) sizes the grid without a sync.

    With KV splits a second launch merges the partials; min_split_keys is the fewest keys a split takes (a multiple
    of 64)."""
    num_tokens, num_q_heads, head_dim = q.shape
    _, _, block_size, num_kv_heads, _ = kv_cache.shape
    group = num_q_heads // num_kv_heads
    batch, max_blocks = block_tables.shape
    assert q.stride(2) == 1 and kv_cache.stride(4) == 1 and head_dim == next_power_of_2(head_dim)
    assert min_split_keys > 0 and min_split_keys % BLOCK_N == 0, f"min_split_keys must be a multiple of {BLOCK_N}"
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    block_q = 1 if max_seqlen_q == 1 else max(1, 128 // group)
    rows = next_power_of_2(max(16, block_q * group))
    q_tiles = triton.cdiv(max_seqlen_q, block_q)
    if num_splits is None:
        programs = q_tiles * batch * num_kv_heads
        num_splits = split_count(block_q, programs, max_blocks * block_size, num_sms(q.device.index or 0))
    out = torch.empty_like(q)
    part_out = part_lse = out  # unused when not split
    if num_splits > 1:
        part_out = torch.empty(num_splits, num_tokens, num_q_heads, head_dim, dtype=torch.float32, device=q.device)
        part_lse = torch.empty(num_splits, num_tokens, num_q_heads, dtype=torch.float32, device=q.device)
    k_cache, v_cache = kv_cache[0], kv_cache[1]
    _paged_attn_kernel[(q_tiles, batch, num_kv_heads * num_splits)](
        q, k_cache, v_cache, block_tables, kv_lens, cu_seqlens_q, out, part_out, part_lse,
        scale * LOG2E,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1), num_tokens, num_q_heads,
        BLOCK_SIZE=block_size, GROUP=group, HEAD_DIM=head_dim, BLOCK_Q=block_q, ROWS=rows, BLOCK_N=BLOCK_N,
        NUM_SPLITS=num_splits, MIN_SPLIT_KEYS=min_split_keys,
        num_warps=4 if rows <= 32 else 8, num_stages=2, **pdl_args(q),
    )
    if num_splits > 1:
        _merge_splits_kernel[(num_tokens, num_q_heads)](
            part_out, part_lse, out, num_tokens, num_q_heads, out.stride(0), out.stride(1),
            NUM_SPLITS=num_splits, SPLITS_PAD=next_power_of_2(num_splits), HEAD_DIM=head_dim, num_warps=4,
            **pdl_args(q),
        )
    return out


def compile_prefill_variants(num_q_heads: int, num_kv_heads: int, head_dim: int, block_size: int,
                             dtype: torch.dtype, device: torch.device) -> None:
    """Compiles the multi-token tile kernel (and the split merge) for every PREFILL_SPLITS count, on a two-token
    query over a throwaway one-block cache: what a model with these heads meets in its eager steps."""
    q = torch.zeros(2, num_q_heads, head_dim, dtype=dtype, device=device)
    kv_cache = torch.zeros(2, 1, block_size, num_kv_heads, head_dim, dtype=dtype, device=device)
    block_tables = torch.zeros(1, 1, dtype=torch.int32, device=device)
    kv_lens = torch.tensor([2], dtype=torch.int32, device=device)
    cu_seqlens_q = torch.tensor([0, 2], dtype=torch.int32, device=device)
    for splits in PREFILL_SPLITS:
        paged_attention_triton(q, kv_cache, block_tables, kv_lens, cu_seqlens_q, 2, num_splits=splits)
