"""The sampler's rules in PyTorch: the CPU path, the full-vocabulary path, and the reference the kernel
(pick_triton) is tested against. See the package docstring for the rules themselves."""
from __future__ import annotations

import torch

from runtime.sampler.knobs import KTH, MASS_FLOOR, MIN_P, SAMPLE, TEMPERATURE, RowKnobs, mass_floor

TINY = 1e-20  # uniforms clamp here before the log: torch.rand may give exactly 0


def exponentials(uniforms: torch.Tensor) -> torch.Tensor:
    """The race's Exp(1) variables E = -log(U), elementwise (the kernel computes the same for its candidates)."""
    return -torch.log(uniforms.clamp_min(TINY))


def keep_sorted(values: torch.Tensor, kth: torch.Tensor, floor: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Scores in descending order `(B, W)` -> the same with what top-k, top-p and min-p drop set to -inf.

    `kth` `(B, 1)` long: the k-th best's rank (past the row: keep all); `floor` `(B, 1)`: `mass_floor`; `min_p`
    `(B, 1)`. Top-p and min-p read the top-k survivors renormalised; rank 0 always stays."""
    width = values.shape[-1]
    kept = values.masked_fill(values < values.gather(-1, kth.clamp(max=width - 1)), float("-inf"))
    probs = kept.softmax(dim=-1)
    below = probs.flip(-1).cumsum(dim=-1).flip(-1)  # the mass at and below each rank: transformers' ascending sum
    drop = (below <= floor) | (probs < min_p * probs[:, :1])
    drop[:, 0] = False
    return kept.masked_fill(drop, float("-inf"))


def filter_logits(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                  min_p: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Over the whole vocabulary: `scaled` `(B, V)` (over temperature) -> the same with the dropped tokens at -inf.
    `(B,)` columns; top_k 0 keeps all. One sort of the vocabulary, ties in id order (as the kernel orders them)."""
    values, order = scaled.sort(dim=-1, descending=True, stable=True)
    vocab = scaled.shape[-1]
    top_k = top_k.long()
    kth = torch.where(top_k > 0, top_k.clamp(max=vocab), vocab) - 1
    min_p = torch.zeros_like(values[:, 0]) if min_p is None else min_p.float()
    kept = keep_sorted(values, kth[:, None], mass_floor(top_p)[:, None], min_p[:, None])
    return torch.empty_like(scaled).scatter_(-1, order, kept)


def race(logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """A draw from softmax(logits) per row `(B, V)`: argmax p_i / E_i, E_i the exponential of vocabulary id i."""
    return (logits.float().softmax(dim=-1) / exponentials(uniforms)).argmax(dim=-1)


def draw_among(values: torch.Tensor, ids: torch.Tensor, uniforms: torch.Tensor, knobs: RowKnobs) -> torch.Tensor:
    """Each row's token `(B,)` drawn among its candidates: `values` `(B, n)` unscaled scores of vocabulary `ids`
    (any order; n <= knobs.width), `uniforms` `(B, V)` the row's uniforms by vocabulary id. Greedy rows (SAMPLE 0)
    take their best candidate. The kernel's arithmetic step by step: scale, order by (score desc, id asc), keep, race.
    """
    t = knobs.table
    scaled = values / t[:, TEMPERATURE:TEMPERATURE + 1]
    by_id = ids.argsort(dim=-1)
    scaled, ids = scaled.gather(-1, by_id), ids.gather(-1, by_id)
    order = scaled.sort(dim=-1, descending=True, stable=True).indices
    scaled, ids = scaled.gather(-1, order), ids.gather(-1, order)
    kept = keep_sorted(scaled, t[:, KTH:KTH + 1].long(), t[:, MASS_FLOOR:MASS_FLOOR + 1], t[:, MIN_P:MIN_P + 1])
    winner = (kept.softmax(dim=-1) / exponentials(uniforms.gather(-1, ids))).argmax(dim=-1, keepdim=True)
    return torch.where(t[:, SAMPLE] > 0, ids.gather(-1, winner)[:, 0], ids[:, 0])


def pick_reference(logits: torch.Tensor, uniforms: torch.Tensor, knobs: RowKnobs) -> torch.Tensor:
    """One token per row `(B,)` from fp32 logits `(B, V)`: a draw among the `knobs.width` best (every drawing row's
    top_k in 1..width); greedy rows take the best of them, the argmax (unless more than `width` ids tie for it)."""
    values, ids = logits.topk(min(knobs.width, logits.shape[-1]), dim=-1)
    return draw_among(values, ids, uniforms, knobs)
