"""Triton kernel for the sampler's narrow path (`sampler._draw_among_top`), one program per row: from the row's
top-k of its scaled logits, the top-k / top-p / min-p masks and the exponential race, with each draw going to a kept
token by id. It replaces ~25 launches (the masks' compares and fills, two softmaxes, a cumsum, an argsort, a
scatter, the argmax and the gathers), which at one row cost more on the host than the vocabulary's top-k.

The same arithmetic as the torch path, in the same order per element: libdevice's expf without flush-to-zero (what
PyTorch's CUDA kernels call), divisions that round to nearest. Only the order of the softmax and cumsum sums
differs, so a draw can differ from the torch path only where a top-p cumulative mass sits within float32 rounding of
top_p, or two race ratios within rounding of each other.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels.softmax_triton import libdevice_exp, torch_softmax


@triton.jit
def _top_draw_kernel(values_ptr, ids_ptr, knobs_ptr, draws_ptr, out_ptr, width, vocab,
                     BLOCK: tl.constexpr, LIBDEVICE_EXP: tl.constexpr):
    row = tl.program_id(0)
    rank = tl.arange(0, BLOCK)
    lane = rank < width
    base = row.to(tl.int64) * width
    values = tl.load(values_ptr + base + rank, mask=lane, other=float("-inf"))  # descending
    ids = tl.load(ids_ptr + base + rank, mask=lane, other=vocab)
    top_k = tl.load(knobs_ptr + row * 3).to(tl.int32)
    top_p = tl.load(knobs_ptr + row * 3 + 1)
    min_p = tl.load(knobs_ptr + row * 3 + 2)
    # _mask_sorted: top-k first, then top-p and min-p on the renormalised survivors; rank 0 always stays
    k = tl.where(top_k > 0, top_k, width)
    drop = (rank >= k) | ~lane
    probs = torch_softmax(tl.where(drop, float("-inf"), values), LIBDEVICE_EXP)
    cum_before = tl.cumsum(probs, 0) - probs
    # top_p 1 is off (float cumsums reach 1 early): no mass reaches the 2 that stands in for it
    drop = drop | (cum_before >= tl.where(top_p < 1.0, top_p, 2.0))
    best = tl.max(tl.where(rank == 0, probs, 0.0), 0)
    drop = drop | (probs < min_p * best)
    drop = drop & (rank != 0)
    kept = tl.where(drop, float("-inf"), values)
    # The r-th draw goes to the kept token with the r-th smallest id: a lane's draw index is how many keys sort
    # before its own (dropped lanes key past the vocabulary, among themselves in lane order; their probability is 0)
    keys = tl.where(kept > float("-inf"), ids, vocab)
    before = (keys[None, :] < keys[:, None]) | ((keys[None, :] == keys[:, None]) & (rank[None, :] < rank[:, None]))
    slot = tl.sum(before.to(tl.int32), 1)
    noise = tl.load(draws_ptr + base + slot, mask=lane, other=1.0)
    # argmax(p / E), E ~ Exp(1): a draw from p; the first lane on an exact tie, as torch.argmax
    winner = tl.argmax(tl.div_rn(torch_softmax(kept, LIBDEVICE_EXP), noise), 0)
    tl.store(out_ptr + row, tl.sum(tl.where(rank == winner, ids, 0), 0))


def draw_among_top_triton(values: torch.Tensor, ids: torch.Tensor, knobs: torch.Tensor, draws: torch.Tensor,
                          vocab: int) -> torch.Tensor:
    """Tokens `[N]` long: `values`/`ids` `[N, K]` (a descending top-k of the scaled logits, fp32 / long), `knobs`
    `[N, 3]` fp32 (top_k, top_p, min_p), `draws` `[N, K]` fp32 (each row's exponentials in stream order). One launch,
    no host sync."""
    rows, width = values.shape
    assert values.dtype == torch.float32 and draws.dtype == torch.float32 and knobs.dtype == torch.float32
    assert ids.dtype == torch.long and ids.shape == draws.shape == values.shape and knobs.shape == (rows, 3)
    values, ids, knobs, draws = (t.contiguous() for t in (values, ids, knobs, draws))
    out = torch.empty(rows, dtype=torch.long, device=values.device)
    _top_draw_kernel[(rows,)](values, ids, knobs, draws, out, width, vocab, BLOCK=triton.next_power_of_2(width),
                              LIBDEVICE_EXP=libdevice_exp(),
                              enable_reflect_ftz=False,  # libdevice's expf without flush-to-zero, as nvcc builds it
                              num_warps=2)
    return out
