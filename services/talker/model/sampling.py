"""Talker and code-predictor token choice: repetition penalty, suppression, temperature, top-k, top-p, seeded draws."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.engine.sampling_params import RULES


@dataclass(frozen=True)
class TalkerSampling:
    """Per-request sampling; the defaults are the model's (`Qwen3OmniMoeForConditionalGeneration.generate`)."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05  # on the codes (codebook 0) this request generated
    predictor_temperature: float = 1.0
    predictor_top_k: int = 50
    predictor_top_p: float = 0.8
    seed: int | None = None  # None: the request gets its own fresh seed, never a shared stream

    def __post_init__(self) -> None:
        for name in ("temperature", "predictor_temperature"):  # greedy is do_sample=False here, not temperature 0
            if not getattr(self, name) > 0:
                raise ValueError(f"TalkerSampling.{name}={getattr(self, name)}: must be > 0")
        for name, rule in (("top_p", "top_p"), ("predictor_top_p", "top_p"), ("top_k", "top_k"),
                           ("predictor_top_k", "top_k"), ("repetition_penalty", "repetition_penalty")):
            if not RULES[rule].ok(getattr(self, name)):
                raise ValueError(f"TalkerSampling.{name}={getattr(self, name)}: {RULES[rule].allowed}")


GREEDY = TalkerSampling(do_sample=False)


def penalize(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Repetition penalty on ids already generated: positive scores / p, negative * p; seen `(B, V)` bool."""
    p = penalty[:, None]
    return torch.where(seen, torch.where(logits < 0, logits * p, logits / p), logits)


def warp(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Temperature, then top-k (ties with the k-th kept), then top-p (smallest set whose mass exceeds p), per row.

    Rows with top_k 0 skip top-k; rows with top_p 1 keep every token with probability > 0.
    """
    logits = logits / temperature[:, None]
    vocab = logits.shape[-1]
    k = top_k.clamp(max=vocab).where(top_k > 0, torch.full_like(top_k, vocab))
    kth = logits.sort(dim=-1, descending=True).values.gather(-1, (k - 1)[:, None])
    logits = logits.masked_fill(logits < kth, float("-inf"))
    ascending, order = logits.sort(dim=-1)
    cum = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop = cum <= (1 - top_p)[:, None]
    drop[:, -1] = False  # always keep the most likely token
    drop = drop.scatter(-1, order, drop)
    return logits.masked_fill(drop & (top_p < 1)[:, None], float("-inf"))


def exponentials(noise: torch.Tensor) -> torch.Tensor:
    """The Exp(1) variables E = -log(U) of the race, from a row's uniforms U (any shape, elementwise)."""
    return -torch.log(noise.clamp_min(1e-20))


def draw(logits: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """An exact draw from softmax(logits) per row by the exponential race: argmax p_i / E_i, E_i ~ Exp(1).

    `noise` `(B, V)` holds each row's own uniforms from its own generator, so a row's draw never depends
    on which other rows share the batch.
    """
    return race(logits, exponentials(noise))


def race(logits: torch.Tensor, exps: torch.Tensor) -> torch.Tensor:
    """`draw` with the uniforms already turned into `exponentials` (a frame turns all of its codebooks' at once)."""
    probs = logits.float().softmax(dim=-1)
    return (probs / exps).argmax(dim=-1)


@dataclass(frozen=True)
class TopKnobs:
    """Per-row settings as `draw_among_top` reads them, built once per frame: the 15 predictor codebooks of a
    frame share them, so their casts, clamps and comparisons run once instead of once per codebook."""

    temperature: torch.Tensor  # (B, 1)
    kth: torch.Tensor  # (B, 1) long: the k-th best score's index among the `width` best
    mass_floor: torch.Tensor  # (B, 1): 1 - top_p; top-p drops an ascending prefix whose mass is <= this
    may_drop: torch.Tensor  # (B, width) bool, ascending order: False for the best token and for rows with top_p 1
    width: int

    @classmethod
    def build(cls, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, width: int) -> TopKnobs:
        """From `(B,)` columns; every row's top_k must be in 1..width (0 or more needs `warp` over the vocabulary)."""
        below_best = torch.arange(width, device=top_p.device) < width - 1  # ascending: the last one is the best
        return cls(temperature[:, None], (top_k.long().clamp(1, width) - 1)[:, None], (1 - top_p)[:, None],
                   below_best & (top_p < 1)[:, None], width)


def draw_among_top(logits: torch.Tensor, knobs: TopKnobs, exps: torch.Tensor) -> torch.Tensor:
    """`race(warp(...), exps)` over each row's `knobs.width` best tokens only, for rows whose top_k is in 1..width.

    Top-k keeps nothing past the k-th score, so the kept set lies inside the `width` best (unless more than
    width - k scores tie the k-th exactly); top-p and the race then run on `(B, width)` instead of sorting the
    vocabulary twice. Same kept set, same exponentials, same winner; only the softmax sums run over fewer zeros.
    """
    values, ids = (logits / knobs.temperature).topk(knobs.width, dim=-1)  # descending
    values = values.masked_fill(values < values.gather(-1, knobs.kth), float("-inf"))
    # top-p sums the kept mass from the least likely token up, as `warp` does over the ascending sort
    drop = (values.flip(-1).softmax(dim=-1).cumsum(dim=-1) <= knobs.mass_floor) & knobs.may_drop
    values = values.masked_fill(drop.flip(-1), float("-inf"))
    winner = (values.softmax(dim=-1) / exps.gather(-1, ids)).argmax(dim=-1, keepdim=True)
    return ids.gather(-1, winner)[:, 0]


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """Gap between the best and second-best score per row: small gaps mark near-ties in greedy parity."""
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]
