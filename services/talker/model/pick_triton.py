"""Triton kernel for a frame's code pick, one program per row: the argmax for greedy rows; for sampling rows
temperature, top-k and top-p among the row's `width` best scores, then the seeded exponential race (`draw_among_top`).

It replaces ~15 launches per pick (torch.topk's gather and sort, two softmaxes, a cumsum, the gathers, the argmax and
the where) with one, 16 times a frame (codebook 0 and the 15 predictor codebooks).

Scores are ordered by (score descending, index ascending): each becomes an int64 key, the score's bits mapped to an
order-preserving int32 in the high half and `BLOCK_V - 1 - index` in the low half, so keys are unique and a bitonic
top-k over them gives the `width` best in that order. Without exact ties this is the order of torch.topk; with ties it
settles what torch leaves unspecified (its CUDA top-k happens to use the same order), the lower index first:
- greedy rows take the first index of the maximum (as torch.argmax);
- top-k keeps every score equal to the k-th, up to `width` of them, lower indices first;
- top-p sums the mass from the least likely token up, so among equal scores at its boundary the higher index drops;
- the race gives an exact tie of prob / exp to the better score, then the lower index.
Both softmaxes use libdevice's expf (without flush-to-zero) and every division rounds to nearest, as PyTorch's CUDA
kernels do; only the order of the sums differs, so a pick can differ from the torch path only where a top-p cumulative
mass or two race ratios are within float32 rounding of each other. NaN scores are not supported.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from runtime.kernels.softmax_triton import libdevice_exp, torch_softmax

# columns of RowKnobs.table (constexpr: the kernel reads them)
SAMPLE = tl.constexpr(0)  # 1.0: the row draws; 0.0: it takes the argmax
TEMPERATURE = tl.constexpr(1)
KTH = tl.constexpr(2)  # rank of the k-th best score among the width best: clamp(top_k, 1, width) - 1
MASS_FLOOR = tl.constexpr(3)  # 1 - top_p, or -1 where top_p is 1 (no cumulative mass is <= -1: nothing drops)
NUM_COLUMNS = tl.constexpr(4)
# a sampling row's keys fall into this many groups, whose maxima set a floor; when at most this many keys reach
# it, only those are sorted (see _best_keys)
CANDIDATES = 128


@dataclass(frozen=True)
class RowKnobs:
    """Per-row settings as the pick kernel reads them (`TopKnobs` in one table), built once per frame: the 15
    predictor codebooks of a frame share them."""

    table: torch.Tensor  # (B, NUM_COLUMNS) float32: the columns above
    width: int  # how many of the best scores a sampling row considers: a power of two

    @classmethod
    def build(cls, sample: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
              width: int) -> RowKnobs:  # fmt: skip
        """From `(B,)` columns as a frame's knobs hold them; every sampling row's top_k must be in 1..width."""
        if width < 1 or width & (width - 1):
            raise ValueError(f"RowKnobs width={width}: must be a power of two (the kernel's bitonic top-k)")
        kth = top_k.long().clamp(1, width) - 1  # as TopKnobs.build
        mass_floor = torch.where(top_p < 1, 1 - top_p, -1.0)
        table = torch.stack((sample.float(), temperature.float(), kth.float(), mass_floor.float()), dim=1)
        return cls(table, width)


@triton.jit
def _score_keys(scores, offs, in_row, BLOCK_V: tl.constexpr):
    """int64 keys in (score descending, index ascending) order; padding lanes below every score, -inf included."""
    scores = tl.where(scores == 0.0, 0.0, scores)  # -0.0 ties +0.0, as torch compares them
    bits = scores.to(tl.int32, bitcast=True)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # negative floats: flip the magnitude's order
    ordered = tl.where(in_row, ordered, -2147483648)
    return (ordered.to(tl.int64) << 32) | (BLOCK_V - 1 - offs).to(tl.int64)


@triton.jit
def _key_scores(keys, BLOCK_V: tl.constexpr):
    """The (scores, indices) that `_score_keys` packed (padding lanes come back as NaN scores)."""
    ordered = (keys >> 32).to(tl.int32)
    bits = tl.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True), BLOCK_V - 1 - keys.to(tl.int32)  # the low half: truncation


@triton.jit
def _pair_side(n: tl.constexpr, j: tl.constexpr):
    """0 or 1 along the j-th innermost of n hypercube dims (size 2 each): which element of its pair a lane holds."""
    return tl.reshape(tl.arange(0, 2), [1] * (n - j - 1) + [2] + [1] * j)


@triton.jit
def _compare_swap(h, flip, n: tl.constexpr, j: tl.constexpr):
    """Orders each pair along the j-th innermost dim: ascending where flip is 0, descending where it is 1."""
    # the pair's other key: its sum less this one (a sum, not Triton's xor-reduce, which the interpreter runs
    # element by element; int64 wraps the same way in both directions)
    other = tl.sum(h, n - 1 - j, keep_dims=True) - h
    return tl.where((h > other) != (flip ^ _pair_side(n, j)), other, h)


@triton.jit
def _merge(h, n: tl.constexpr, size: tl.constexpr, ALTERNATE: tl.constexpr):
    """Bitonic merge of the blocks of 2**size keys (the `size` innermost dims): each descending, or ascending and
    descending by turns."""
    if ALTERNATE:
        flip = _pair_side(n, size)
    else:
        flip = 1
    for i in tl.static_range(size):
        h = _compare_swap(h, flip, n, size - 1 - i)
    return h


@triton.jit
def _top_keys(keys, LOG_N: tl.constexpr, LOG_K: tl.constexpr):
    """The 2**LOG_K largest of 2**LOG_N keys, descending, by a bitonic top-k: sort blocks of 2**LOG_K in
    alternating directions, then halve by the max of neighbouring blocks (the best of their union, a bitonic block)
    and merge, until one block is left."""
    h = tl.reshape(keys, [2] * LOG_N)
    for size in tl.static_range(1, LOG_K + 1):
        h = _merge(h, LOG_N, size, size < LOG_N)
    for n in tl.static_range(LOG_N - 1, LOG_K - 1, -1):  # n: dims left after halving
        h = _merge(tl.max(h, n - LOG_K), n, LOG_K, n > LOG_K)
    return tl.reshape(h, [2**LOG_K])


@triton.jit
def _best_keys(keys, scratch_row, LOG_V: tl.constexpr, LOG_W: tl.constexpr, LOG_C: tl.constexpr):
    """The 2**LOG_W largest of a row's 2**LOG_V keys, descending.

    A bitonic top-k over the whole row costs ~30 compare-exchange passes over every key. Fewer suffice: the
    2**LOG_W-th largest of 2**LOG_C group maxima (group = index mod 2**LOG_C) is a floor that at least 2**LOG_W keys
    reach, and on scores like the heads' (~90 of 2048-4096 reach it on random ones) at most 2**LOG_C do: those are
    packed into the row's scratch (their slots a running count) and the top-k runs on them alone. A row where more
    reach it (scores that crowd into few groups) takes the whole-row top-k instead; both give the same keys.
    """
    if LOG_V > LOG_C:
        maxima = tl.max(tl.reshape(keys, [2 ** (LOG_V - LOG_C), 2**LOG_C]), 0)
        floor = tl.min(_top_keys(maxima, LOG_C, LOG_W), 0)
        reach = (keys >= floor).to(tl.int32)
        count = tl.sum(reach, 0)
        if count <= 2**LOG_C:
            tl.store(scratch_row + tl.cumsum(reach, 0) - 1, keys, mask=reach > 0)
            tl.debug_barrier()  # every thread's stores land before any thread loads
            slots = tl.arange(0, 2**LOG_C)
            lowest = tl.full([2**LOG_C], -2147483648, tl.int32).to(tl.int64) << 32  # below every key
            top = _top_keys(tl.load(scratch_row + slots, mask=slots < count, other=lowest), LOG_C, LOG_W)
        else:
            top = _top_keys(keys, LOG_V, LOG_W)
    else:
        top = _top_keys(keys, LOG_V, LOG_W)
    return top


@triton.jit
def _draw(scaled, offs, in_row, vocab, exps_row, scratch_row, kth, mass_floor, LOG_V: tl.constexpr,
          LOG_W: tl.constexpr, LOG_C: tl.constexpr, LIBDEVICE_EXP: tl.constexpr):
    """`draw_among_top` for one row of temperature-scaled scores: the drawn token's index."""
    top = _best_keys(_score_keys(scaled, offs, in_row, 2**LOG_V), scratch_row, LOG_V, LOG_W, LOG_C)  # descending
    scores, ids = _key_scores(top, 2**LOG_V)
    rank = tl.arange(0, 2**LOG_W)
    valid = ids < vocab  # false only where the vocabulary is narrower than the width
    scores = tl.where(valid, scores, float("-inf"))
    kth_score = tl.max(tl.where(rank == kth, scores, float("-inf")), 0)
    kept = tl.where(scores < kth_score, float("-inf"), scores)
    # top-p: the mass at and below each rank is the ascending cumsum; the best (rank 0) always stays
    below = tl.cumsum(torch_softmax(kept, LIBDEVICE_EXP), 0, reverse=True)
    kept = tl.where((below <= mass_floor) & (rank > 0), float("-inf"), kept)
    exps = tl.load(exps_row + ids, mask=valid, other=1.0)
    winner = tl.argmax(tl.div_rn(torch_softmax(kept, LIBDEVICE_EXP), exps), 0)  # first rank on an exact tie
    return tl.sum(tl.where(rank == winner, ids, 0), 0)


@triton.jit
def _pick_kernel(
    logits_ptr, logits_stride, exps_ptr, exps_stride, knobs_ptr, scratch_ptr, codes_ptr, vocab,
    LOG_V: tl.constexpr, LOG_W: tl.constexpr, LOG_C: tl.constexpr, SAMPLING: tl.constexpr,
    LIBDEVICE_EXP: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, 2**LOG_V)
    in_row = offs < vocab
    logits = tl.load(logits_ptr + row.to(tl.int64) * logits_stride + offs, mask=in_row, other=float("-inf"))
    code = tl.argmax(logits, 0)  # first index on ties, like torch.argmax
    if SAMPLING:
        knobs = knobs_ptr + row * NUM_COLUMNS
        if tl.load(knobs + SAMPLE) > 0:  # uniform per program: greedy rows skip the draw
            scaled = tl.div_rn(logits, tl.broadcast_to(tl.load(knobs + TEMPERATURE), logits.shape))
            exps_row = exps_ptr + row.to(tl.int64) * exps_stride
            kth = tl.load(knobs + KTH).to(tl.int32)
            mass_floor = tl.load(knobs + MASS_FLOOR)
            scratch_row = scratch_ptr + row.to(tl.int64) * 2**LOG_C
            code = _draw(scaled, offs, in_row, vocab, exps_row, scratch_row, kth, mass_floor, LOG_V, LOG_W, LOG_C,
                         LIBDEVICE_EXP)
    tl.store(codes_ptr + row, code.to(tl.int64))


def pick_codes(logits: torch.Tensor, exps: torch.Tensor | None, knobs: RowKnobs | None,
               num_warps: int = 4) -> torch.Tensor:  # fmt: skip
    """One code per row `(B,)` long, from fp32 logits `(B, V)`: what `_Picker` gives in "topk" mode, or in "greedy"
    mode when `knobs` is None. `exps` `(B, V)` fp32 (the race's exponentials; rows may be strided, as a slice of a
    frame's `(B, G-1, V)`) is needed with knobs. One launch, no host sync: CUDA-graph capturable. 4 warps: on the
    H200 as fast as 8 or faster at both vocabularies and 1-32 rows, 2 are 20-50% slower (bench_pick.py)."""
    rows, vocab = logits.shape
    assert logits.dtype == torch.float32 and logits.stride(1) == 1, "logits: fp32 with contiguous rows"
    codes = torch.empty(rows, dtype=torch.long, device=logits.device)
    if knobs is None:
        exps_arg, exps_stride, table, scratch, width = logits, 0, logits, logits, 1  # never read: greedy rows only
    else:
        assert exps is not None and exps.shape == logits.shape and exps.dtype == torch.float32
        assert exps.stride(1) == 1 and knobs.table.shape == (rows, NUM_COLUMNS.value) and knobs.table.is_contiguous()
        exps_arg, exps_stride, table, width = exps, exps.stride(0), knobs.table, knobs.width
        scratch = torch.empty(rows, max(CANDIDATES, width), dtype=torch.int64, device=logits.device)
    _pick_kernel[(rows,)](logits, logits.stride(0), exps_arg, exps_stride, table, scratch, codes, vocab,
                          LOG_V=(max(vocab, width) - 1).bit_length(), LOG_W=width.bit_length() - 1,
                          LOG_C=max(CANDIDATES, width).bit_length() - 1, SAMPLING=knobs is not None,
                          LIBDEVICE_EXP=libdevice_exp(),
                          enable_reflect_ftz=False,  # libdevice's expf without flush-to-zero, as nvcc builds it
                          num_warps=num_warps)  # fmt: skip
    return codes
