"""The sampler's Triton kernel, one program per row: the argmax for greedy rows; for drawing rows temperature, then
top-k, top-p and min-p among the row's `width` best scores, then the seeded exponential race (`rules.draw_among`).

A row comes in two forms: a whole vocabulary (the talker's 3,072 and the predictor's 2,048 ids: the kernel finds
the best itself, replacing torch.topk's launches) or candidates with their vocabulary ids (the thinker's 152k ids,
whose torch.topk runs first: a row that wide does not fit one program). One launch replaces ~15-25 (the top-k's
gather and sort, two softmaxes, a cumsum, the gathers, the argmax, the where), 16 times a talker frame.

Scores are ordered by (score descending, id ascending): each becomes an int64 key, the score's bits mapped to an
order-preserving int32 in the high half and `MAX_ID - id` in the low half, so keys are unique and a bitonic top-k
over them gives the `width` best in that order. Without exact ties this is the order of torch.topk; with ties it
settles what torch leaves unspecified, the lower id first:
- greedy rows take the lowest id of the maximum (as torch.argmax over a vocabulary);
- top-k keeps every score equal to the k-th, up to `width` of them, lower ids first;
- top-p sums the mass from the least likely token up, so among equal scores at its boundary the higher id drops;
- the race gives an exact tie of prob / exp to the better score, then the lower id.
Softmaxes use libdevice's expf and the exponentials libdevice's logf (without flush-to-zero), every division rounds
to nearest, as PyTorch's CUDA kernels do; only the order of the sums differs, so a pick can differ from the torch
reference only where a top-p cumulative mass or two race ratios are within float32 rounding of each other. NaN
scores are not supported.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from runtime.kernels.pdl import pdl_args, pdl_enter
from runtime.kernels.softmax_triton import libdevice_exp, torch_softmax
from runtime.sampler import knobs as columns
from runtime.sampler.knobs import RowKnobs
from runtime.sampler.rules import TINY

SAMPLE = tl.constexpr(columns.SAMPLE)
TEMPERATURE = tl.constexpr(columns.TEMPERATURE)
KTH = tl.constexpr(columns.KTH)
MASS_FLOOR = tl.constexpr(columns.MASS_FLOOR)
MIN_P = tl.constexpr(columns.MIN_P)
NUM_COLUMNS = tl.constexpr(columns.NUM_COLUMNS)
MAX_ID = tl.constexpr(2**31 - 1)  # vocabulary ids stay below it (written `-x + MAX_ID`: a constexpr on the left
# of a tensor stays a constexpr in the interpreter)
LOWEST = tl.constexpr(-(2**31))  # a padding lane's high half: below every score's, -inf's included
FLOOR_U = tl.constexpr(TINY)
# a whole-vocabulary row's keys fall into this many groups, whose maxima set a floor; when at most this many keys
# reach it, only those are sorted (see _best_keys)
CANDIDATES = 128


@triton.jit
def _score_keys(scores, ids, in_row):
    """int64 keys in (score descending, id ascending) order; padding lanes below every score, -inf included."""
    scores = tl.where(scores == 0.0, 0.0, scores)  # -0.0 ties +0.0, as torch compares them
    bits = scores.to(tl.int32, bitcast=True)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # negative floats: flip the magnitude's order
    ordered = tl.where(in_row, ordered, LOWEST)
    return (ordered.to(tl.int64) << 32) | (-ids.to(tl.int64) + MAX_ID)


@triton.jit
def _key_scores(keys):
    """The (scores, ids, in_row) that `_score_keys` packed (padding lanes come back with NaN scores)."""
    ordered = (keys >> 32).to(tl.int32)
    bits = tl.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True), -keys.to(tl.int32) + MAX_ID, ordered != LOWEST  # low half: truncation


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

    A bitonic top-k over a whole vocabulary costs ~30 compare-exchange passes over every key. Fewer suffice: the
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
            lowest = tl.full([2**LOG_C], LOWEST, tl.int32).to(tl.int64) << 32  # below every key
            top = _top_keys(tl.load(scratch_row + slots, mask=slots < count, other=lowest), LOG_C, LOG_W)
        else:
            top = _top_keys(keys, LOG_V, LOG_W)
    else:
        top = _top_keys(keys, LOG_V, LOG_W)
    return top


@triton.jit
def _draw(keys, uniforms_row, scratch_row, kth, floor, min_p, LOG_V: tl.constexpr, LOG_W: tl.constexpr,
          LOG_C: tl.constexpr, LIBDEVICE: tl.constexpr):
    """`rules.draw_among` for one row's keys of temperature-scaled scores: the drawn token's id."""
    scores, ids, valid = _key_scores(_best_keys(keys, scratch_row, LOG_V, LOG_W, LOG_C))  # descending
    rank = tl.arange(0, 2**LOG_W)
    scores = tl.where(valid, scores, float("-inf"))  # invalid only where a row has fewer ids than the width
    kth_score = tl.max(tl.where(rank == kth, scores, float("-inf")), 0)
    kept = tl.where(scores < kth_score, float("-inf"), scores)
    probs = torch_softmax(kept, LIBDEVICE)
    below = tl.cumsum(probs, 0, reverse=True)  # the mass at and below each rank: the ascending sum
    best = tl.max(tl.where(rank == 0, probs, 0.0), 0)
    drop = ((below <= floor) | (probs < min_p * best)) & (rank > 0)
    kept = tl.where(drop, float("-inf"), kept)
    uniforms = tl.maximum(tl.load(uniforms_row + ids, mask=valid, other=1.0), FLOOR_U)
    if LIBDEVICE:
        logs = libdevice.log(uniforms)
    else:  # the interpreter runs no extern functions: NumPy's log stands in
        logs = tl.log(uniforms)
    exps = tl.where(valid, -logs, 1.0)  # padding lanes: probability 0 over 1, never a 0 / 0
    winner = tl.argmax(tl.div_rn(torch_softmax(kept, LIBDEVICE), exps), 0)  # first rank on an exact tie
    return tl.sum(tl.where(rank == winner, ids, 0), 0)


@triton.jit
def _pick_kernel(
    scores_ptr, scores_stride, ids_ptr, uniforms_ptr, uniforms_stride, knobs_ptr, scratch_ptr, out_ptr, length,
    LOG_V: tl.constexpr, LOG_W: tl.constexpr, LOG_C: tl.constexpr, HAS_IDS: tl.constexpr, LIBDEVICE: tl.constexpr,
    PDL: tl.constexpr,
):
    pdl_enter(PDL)
    row = tl.program_id(0)
    offs = tl.arange(0, 2**LOG_V)
    in_row = offs < length
    scores = tl.load(scores_ptr + row.to(tl.int64) * scores_stride + offs, mask=in_row, other=float("-inf"))
    if HAS_IDS:  # candidates: their vocabulary ids alongside (a contiguous (B, length) tensor)
        ids = tl.load(ids_ptr + row.to(tl.int64) * length + offs, mask=in_row, other=0).to(tl.int32)
    else:
        ids = offs
    knobs = knobs_ptr + row * NUM_COLUMNS
    if tl.load(knobs + SAMPLE) > 0:  # uniform per program: greedy rows skip the draw
        scaled = tl.div_rn(scores, tl.broadcast_to(tl.load(knobs + TEMPERATURE), scores.shape))
        code = _draw(_score_keys(scaled, ids, in_row), uniforms_ptr + row.to(tl.int64) * uniforms_stride,
                     scratch_ptr + row.to(tl.int64) * 2**LOG_C, tl.load(knobs + KTH).to(tl.int32),
                     tl.load(knobs + MASS_FLOOR), tl.load(knobs + MIN_P), LOG_V, LOG_W, LOG_C, LIBDEVICE)
    else:
        code = -tl.max(_score_keys(scores, ids, in_row), 0).to(tl.int32) + MAX_ID  # the lowest id of the best
    tl.store(out_ptr + row, code.to(tl.int64))


def pick_triton(scores: torch.Tensor, uniforms: torch.Tensor, knobs: RowKnobs, ids: torch.Tensor | None = None,
                num_warps: int = 4) -> torch.Tensor:  # fmt: skip
    """One token per row `(B,)` long: `rules.pick_reference` for a whole-vocabulary row `scores` `(B, V)`, or, with
    `ids`, `rules.draw_among` for candidates `scores` `(B, n)` (n <= width, unscaled) of vocabulary `ids` (long).
    fp32 scores with contiguous rows; `uniforms` `(B, V)` fp32 by vocabulary id (rows may be strided, as a codebook's
    slice of a talker frame's). One launch, no host sync: CUDA-graph capturable. 4 warps: on the H200 as fast as 8
    or faster for the talker's vocabularies at 1-32 rows, 2 are 20-50% slower (bench/talker/bench_pick.py)."""
    rows, length = scores.shape
    width = knobs.width
    assert scores.dtype == torch.float32 and scores.stride(1) == 1, "scores: fp32 with contiguous rows"
    assert uniforms.dtype == torch.float32 and uniforms.stride(1) == 1 and uniforms.shape[0] == rows
    assert knobs.table.shape == (rows, NUM_COLUMNS.value) and knobs.table.is_contiguous()
    if ids is not None:
        assert ids.shape == scores.shape and length <= width
        ids = ids.contiguous()
    out = torch.empty(rows, dtype=torch.long, device=scores.device)
    log_v, log_c = (max(length, width) - 1).bit_length(), max(CANDIDATES, width).bit_length() - 1
    # the scratch holds the keys that reach a whole row's floor: rows of 2**log_c keys or fewer never touch it
    scratch = torch.empty(rows, 2**log_c, dtype=torch.int64, device=scores.device) if log_v > log_c else out
    _pick_kernel[(rows,)](scores, scores.stride(0), scores if ids is None else ids, uniforms, uniforms.stride(0),
                          knobs.table, scratch, out, length, LOG_V=log_v, LOG_W=width.bit_length() - 1, LOG_C=log_c,
                          HAS_IDS=ids is not None,
                          LIBDEVICE=libdevice_exp(),
                          enable_reflect_ftz=False,  # libdevice without flush-to-zero, as nvcc builds PyTorch
                          num_warps=num_warps, **pdl_args(scores))  # fmt: skip
    return out
