"""Triton MoE routing kernels: fused softmax/top-k/renormalise, and a one-program expert grouping for small batches."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.moe_align import MoeAlignment, cdiv, padded_bound
from runtime.kernels.moe_reference import Routing


@triton.jit(do_not_specialize=["num_tokens"])  # one compile for every batch size
def _topk_softmax_kernel(
    logits_ptr, ids_ptr, weights_ptr,
    num_tokens, num_experts, stride_lt,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
    RENORM: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < num_tokens
    mask = row_ok[:, None] & (cols[None, :] < num_experts)
    x = tl.load(logits_ptr + rows[:, None] * stride_lt + cols[None, :], mask=mask, other=-1e30)
    x = x.to(tl.float32)
    x_max = tl.max(x, 1)
    p = tl.exp(x - x_max[:, None])
    p = p / tl.sum(p, 1)[:, None]
    p = tl.where(mask, p, -1.0)  # padding columns are never picked; -1e30 above, not -inf, keeps padding rows NaN-free
    kcols = tl.arange(0, K_PAD)
    top_w = tl.zeros([BLOCK_T, K_PAD], dtype=tl.float32)
    top_i = tl.zeros([BLOCK_T, K_PAD], dtype=tl.int32)
    for j in tl.static_range(TOP_K):
        best = tl.max(p, 1)
        # lowest expert index among equal probabilities, as a stable top-k would pick
        idx = tl.min(tl.where(p == best[:, None], cols[None, :], BLOCK_E), 1)
        top_w = tl.where(kcols[None, :] == j, best[:, None], top_w)
        top_i = tl.where(kcols[None, :] == j, idx[:, None], top_i)
        p = tl.where(cols[None, :] == idx[:, None], -2.0, p)
    if RENORM:
        top_w = top_w / tl.sum(top_w, 1)[:, None]
    out_mask = row_ok[:, None] & (kcols[None, :] < TOP_K)
    out_offs = rows[:, None] * TOP_K + kcols[None, :]
    tl.store(ids_ptr + out_offs, top_i, mask=out_mask)
    tl.store(weights_ptr + out_offs, top_w.to(weights_ptr.dtype.element_ty), mask=out_mask)


def topk_softmax_triton(logits: torch.Tensor, top_k: int, norm_topk_prob: bool = True) -> Routing:
    """`topk_softmax_reference` in one launch: logits [T, E] -> ids int32 [T, k], weights [T, k] in logits' dtype."""
    num_tokens, num_experts = logits.shape
    ids = torch.empty(num_tokens, top_k, dtype=torch.int32, device=logits.device)
    weights = torch.empty(num_tokens, top_k, dtype=logits.dtype, device=logits.device)
    block_t = 4
    _topk_softmax_kernel[(cdiv(num_tokens, block_t),)](
        logits, ids, weights, num_tokens, num_experts, logits.stride(0),
        TOP_K=top_k, K_PAD=next_power_of_2(top_k), BLOCK_T=block_t, BLOCK_E=next_power_of_2(num_experts),
        RENORM=norm_topk_prob, num_warps=4,
    )
    return Routing(ids, weights)


@triton.jit(do_not_specialize=["num_pairs", "max_padded", "max_blocks"])
def _align_small_kernel(
    topk_ids_ptr, sorted_ids_ptr, expert_ids_ptr, num_padded_ptr,
    num_pairs, num_experts, max_padded, max_blocks,
    BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr,
):
    experts = tl.arange(0, BLOCK_E)
    counts = tl.zeros([BLOCK_E], dtype=tl.int32)
    for start in range(0, num_pairs, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        e = tl.load(topk_ids_ptr + offs, mask=offs < num_pairs, other=BLOCK_E)  # BLOCK_E matches no expert
        counts += tl.sum((e[:, None] == experts[None, :]).to(tl.int32), 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    starts = ends - padded
    total = tl.sum(padded, 0)
    tl.store(num_padded_ptr, total)
    for bstart in range(0, max_blocks, CHUNK):
        blocks = bstart + tl.arange(0, CHUNK)
        rows = blocks * BLOCK_M
        inside = (rows[:, None] >= starts[None, :]) & (rows[:, None] < ends[None, :]) & (experts[None, :] < num_experts)
        owner = tl.sum(tl.where(inside, experts[None, :], 0), 1)
        owned = tl.sum(inside.to(tl.int32), 1) > 0
        tl.store(expert_ids_ptr + blocks, tl.where(owned, owner, -1), mask=blocks < max_blocks)
    for rstart in range(0, max_padded, CHUNK):
        rows = rstart + tl.arange(0, CHUNK)
        tl.store(sorted_ids_ptr + rows, tl.zeros([CHUNK], dtype=tl.int32) + num_pairs, mask=rows < total)
    # the scatter below may overwrite sentinels written by other threads: order the two phases
    tl.debug_barrier()
    cursor = starts
    for start in range(0, num_pairs, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        e = tl.load(topk_ids_ptr + offs, mask=offs < num_pairs, other=BLOCK_E)
        onehot = (e[:, None] == experts[None, :]).to(tl.int32)  # [CHUNK, BLOCK_E]
        rank = tl.sum(tl.cumsum(onehot, 0) * onehot, 1) - 1  # rank among earlier pairs of its expert in the chunk
        dest = tl.sum(onehot * cursor[None, :], 1) + rank
        tl.store(sorted_ids_ptr + dest, offs, mask=offs < num_pairs)
        cursor += tl.sum(onehot, 0)


def align_triton_small(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> MoeAlignment:
    """`align_torch` in a single one-program launch: cheapest for decode-size batches, slow for large ones."""
    num_pairs = topk_ids.numel()
    max_padded = padded_bound(num_pairs, num_experts, block_m)
    max_blocks = cdiv(max_padded, block_m)
    sorted_ids = torch.empty(max_padded, dtype=torch.int32, device=topk_ids.device)
    expert_ids = torch.empty(max_blocks, dtype=torch.int32, device=topk_ids.device)
    num_padded = torch.empty(1, dtype=torch.int32, device=topk_ids.device)
    _align_small_kernel[(1,)](
        topk_ids, sorted_ids, expert_ids, num_padded, num_pairs, num_experts, max_padded, max_blocks,
        BLOCK_M=block_m, BLOCK_E=next_power_of_2(num_experts), CHUNK=64, num_warps=4,
    )
    return MoeAlignment(sorted_ids, expert_ids, num_padded, block_m)
