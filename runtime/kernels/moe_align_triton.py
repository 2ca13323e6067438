"""Triton expert grouping for the MoE GEMMs: a memset, a count and a place launch, spread over the GPU.

Every program's tiles are small ([16 pairs, experts]) and use reductions, not 2-D scans: a program runs its
instructions back to back, so [128, 128] tiles had made a 256-pair grouping take ~20 us on the H200 (a chain of ~5k
dependent instructions per thread), longer than the GEMMs it feeds; now 6.1 us, and 28 us at 32k pairs. A
one-program grouping (one launch) was slower from 64 pairs on and only 3 us faster at 8, where the small MoE path
needs no grouping at all, so it was dropped (bench_kernels.py `moe_align`).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.moe_align import MoeAlignment, cdiv, padded_bound

CHUNK = 16  # pairs (and blocks) one program handles


@triton.jit
def _expert_bounds(counts, BLOCK_M: tl.constexpr):
    """(padded start, padded end) of every expert from its pair count."""
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    return ends - padded, ends


@triton.jit
def _rank_in_chunk(e, CHUNK: tl.constexpr):
    """For each pair of the chunk, how many earlier pairs of the chunk name the same expert."""
    i = tl.arange(0, CHUNK)
    earlier = (e[:, None] == e[None, :]) & (i[None, :] < i[:, None])
    return tl.sum(earlier.to(tl.int32), 1)


@triton.jit
def _label_blocks(expert_ids_ptr, blocks, starts, ends, num_experts, max_blocks, BLOCK_M: tl.constexpr,
                  BLOCK_E: tl.constexpr):
    """expert_ids[b] = the expert whose padded rows hold block b's first row, -1 past the last expert."""
    experts = tl.arange(0, BLOCK_E)
    rows = blocks * BLOCK_M
    inside = (rows[:, None] >= starts[None, :]) & (rows[:, None] < ends[None, :]) & (experts[None, :] < num_experts)
    owner = tl.sum(tl.where(inside, experts[None, :], 0), 1)
    owned = tl.sum(inside.to(tl.int32), 1) > 0
    tl.store(expert_ids_ptr + blocks, tl.where(owned, owner, -1), mask=blocks < max_blocks)


@triton.jit
def _pad_groups(sorted_ids_ptr, starts, counts, ends, num_pairs, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr):
    """The sentinel num_pairs in every expert's padding rows (at most BLOCK_M - 1 after its pairs)."""
    pad = (starts + counts)[:, None] + tl.arange(0, BLOCK_M)[None, :]  # [BLOCK_E, BLOCK_M]
    sentinel = tl.zeros([BLOCK_E, BLOCK_M], dtype=tl.int32) + num_pairs
    tl.store(sorted_ids_ptr + pad, sentinel, mask=pad < ends[:, None])


@triton.jit(do_not_specialize=["num_pairs"])
def _count_pairs_kernel(topk_ids_ptr, counts_ptr, num_pairs, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr):
    """counts[e] += pairs of this chunk routed to e (one atomic per expert the chunk names)."""
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(topk_ids_ptr + offs, mask=offs < num_pairs, other=BLOCK_E)
    experts = tl.arange(0, BLOCK_E)
    hist = tl.sum((e[:, None] == experts[None, :]).to(tl.int32), 0)
    tl.atomic_add(counts_ptr + experts, hist, mask=hist > 0)


@triton.jit(do_not_specialize=["num_pairs", "max_blocks"])
def _place_pairs_kernel(
    topk_ids_ptr, counts_ptr, fill_ptr, sorted_ids_ptr, expert_ids_ptr, num_padded_ptr,
    num_pairs, num_experts, max_blocks,
    BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr,
):
    """Program p places pair chunk p at its expert's rows, labels block chunk p; program 0 writes the padding."""
    pid = tl.program_id(0)
    experts = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + experts, mask=experts < num_experts, other=0)
    starts, ends = _expert_bounds(counts, BLOCK_M)
    offs = pid * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(topk_ids_ptr + offs, mask=offs < num_pairs, other=BLOCK_E)
    onehot = (e[:, None] == experts[None, :]).to(tl.int32)  # [CHUNK, BLOCK_E]
    hist = tl.sum(onehot, 0)
    # reserve this chunk's rows in each expert; chunks land in whatever order the atomics run, which moves
    # rows inside an expert's group but changes no row's arithmetic
    base = tl.atomic_add(fill_ptr + experts, hist, mask=hist > 0) + starts
    dest = tl.sum(onehot * base[None, :], 1) + _rank_in_chunk(e, CHUNK)
    tl.store(sorted_ids_ptr + dest, offs, mask=offs < num_pairs)
    _label_blocks(expert_ids_ptr, pid * CHUNK + tl.arange(0, CHUNK), starts, ends, num_experts, max_blocks, BLOCK_M,
                  BLOCK_E)
    if pid == 0:
        tl.store(num_padded_ptr, tl.sum(ends - starts, 0))
        _pad_groups(sorted_ids_ptr, starts, counts, ends, num_pairs, BLOCK_M, BLOCK_E)


def align_triton(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> MoeAlignment:
    """`align_torch` in three launches (a memset, count, place); pairs of one expert land in atomic order."""
    num_pairs = topk_ids.numel()
    max_padded = padded_bound(num_pairs, num_experts, block_m)
    max_blocks = cdiv(max_padded, block_m)
    device = topk_ids.device
    sorted_ids = torch.empty(max_padded, dtype=torch.int32, device=device)
    expert_ids = torch.empty(max_blocks, dtype=torch.int32, device=device)
    num_padded = torch.empty(1, dtype=torch.int32, device=device)
    scratch = torch.zeros(2, num_experts, dtype=torch.int32, device=device)  # counts, then rows filled so far
    block_e = next_power_of_2(num_experts)
    _count_pairs_kernel[(cdiv(num_pairs, CHUNK),)](topk_ids, scratch[0], num_pairs, BLOCK_E=block_e, CHUNK=CHUNK)
    _place_pairs_kernel[(max(cdiv(num_pairs, CHUNK), cdiv(max_blocks, CHUNK)),)](
        topk_ids, scratch[0], scratch[1], sorted_ids, expert_ids, num_padded, num_pairs, num_experts, max_blocks,
        BLOCK_M=block_m, BLOCK_E=block_e, CHUNK=CHUNK, num_warps=4,
    )
    return MoeAlignment(sorted_ids, expert_ids, num_padded, block_m)
