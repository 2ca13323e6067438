"""Groups (token, expert) pairs per expert, each group padded to the GEMM's row block, on device with no host sync."""
from __future__ import annotations

from typing import NamedTuple

import torch


class MoeAlignment(NamedTuple):
    """Pairs sorted by expert, padded per expert to a multiple of `block_m`.

    Pair p is token p // k's slot p % k. Block b (rows b*block_m ...) belongs to expert `expert_ids[b]`;
    padding rows hold the sentinel `num_pairs`. Only the first `num_padded[0]` rows are meaningful; the
    buffers are sized by a bound known on the host, so grids never need a device read.
    """

    sorted_ids: torch.Tensor  # int32 [max_padded]
    expert_ids: torch.Tensor  # int32 [max_blocks], -1 past the last used block
    num_padded: torch.Tensor  # int32 [1]
    block_m: int


def padded_bound(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Most rows the padded grouping can take: every non-empty expert wastes at most block_m - 1 rows."""
    return num_pairs + min(num_experts, num_pairs) * (block_m - 1)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def align_torch(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> MoeAlignment:
    """The alignment in plain torch ops (about a dozen launches, none syncing); runs on any device."""
    flat = topk_ids.reshape(-1).long()  # [P]
    num_pairs = flat.numel()
    device = flat.device
    max_padded = padded_bound(num_pairs, num_experts, block_m)
    max_blocks = cdiv(max_padded, block_m)
    counts = torch.zeros(num_experts, dtype=torch.long, device=device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))  # bincount would sync for its output size
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)  # padded end row of each expert
    order = torch.argsort(flat, stable=True)  # pairs grouped by expert, in pair order within an expert
    sorted_experts = flat[order]
    first_unpadded = torch.cumsum(counts, 0) - counts
    rank = torch.arange(num_pairs, device=device) - first_unpadded[sorted_experts]  # position within its expert
    dest = (ends - padded)[sorted_experts] + rank
    sorted_ids = torch.full((max_padded,), num_pairs, dtype=torch.int32, device=device)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    block_rows = torch.arange(max_blocks, device=device) * block_m
    # right=True skips empty experts, whose end equals the previous end
    expert_ids = torch.searchsorted(ends, block_rows, right=True)
    expert_ids = torch.where(expert_ids < num_experts, expert_ids, -1).to(torch.int32)
    return MoeAlignment(sorted_ids, expert_ids, ends[-1:].to(torch.int32), block_m)
