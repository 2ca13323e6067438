"""Talker sampling: processors agree with transformers' logits processors; draws follow the distribution, per row."""
from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
)

from services.talker.model.sampling import (
    TalkerSampling, TopKnobs, draw, draw_among_top, exponentials, penalize, race, warp,
)


def test_penalty_matches_transformers() -> None:
    g = torch.Generator().manual_seed(0)
    logits, history = torch.randn(2, 50, generator=g), torch.randint(0, 50, (2, 12), generator=g)
    seen = torch.zeros(2, 50, dtype=torch.bool).scatter(1, history, True)
    ref = RepetitionPenaltyLogitsProcessor(1.05)(history, logits.clone())
    assert torch.equal(penalize(logits, seen, torch.tensor([1.05, 1.05])), ref)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0.9, 50, 1.0), (1.0, 50, 0.8), (0.7, 5, 0.5), (1.0, 0, 0.9)]
)
def test_warp_matches_transformers(temperature: float, top_k: int, top_p: float) -> None:
    logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(1)) * 3
    ref = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        ref = TopKLogitsWarper(top_k)(None, ref)
    if top_p < 1:
        ref = TopPLogitsWarper(top_p)(None, ref)
    ours = warp(logits, torch.full((3,), temperature), torch.full((3,), top_k), torch.full((3,), top_p))
    assert torch.equal(ours.isinf(), ref.isinf())
    assert torch.allclose(ours[~ours.isinf()], ref[~ref.isinf()])


def test_warp_per_row_knobs() -> None:
    logits = torch.randn(2, 100, generator=torch.Generator().manual_seed(2))
    out = warp(logits, torch.tensor([1.0, 1.0]), torch.tensor([3, 10]), torch.tensor([1.0, 1.0]))
    assert out[0].isfinite().sum() == 3 and out[1].isfinite().sum() == 10


def test_draw_follows_the_distribution() -> None:
    logits = torch.tensor([[0.0, 1.0, 2.0, float("-inf")]])
    g = torch.Generator().manual_seed(3)
    counts = torch.bincount(torch.cat([draw(logits, torch.rand(1, 4, generator=g)) for _ in range(20000)]), minlength=4)
    assert counts[3] == 0
    assert torch.allclose(counts[:3] / 20000.0, logits[0, :3].softmax(-1), atol=0.015)


@pytest.mark.parametrize(
    ("field", "value", "allowed"), [
        ("temperature", 0.0, "must be > 0"), ("temperature", float("nan"), "must be > 0"),
        ("predictor_temperature", -1.0, "must be > 0"), ("top_p", 1.5, r"must be in \(0, 1\]"),
        ("predictor_top_p", 0.0, r"must be in \(0, 1\]"), ("top_k", -1, "must be >= 0"),
        ("predictor_top_k", -2, "must be >= 0"), ("repetition_penalty", 0, "must be > 0"),
        ("repetition_penalty", float("inf"), "not NaN or infinite"),
    ]
)
def test_bad_sampling_names_the_field_and_what_is_allowed(field: str, value: float, allowed: str) -> None:
    with pytest.raises(ValueError, match=f"TalkerSampling.{field}=.*: .*{allowed}"):
        TalkerSampling(**{field: value})


def test_draw_among_top_equals_the_full_vocabulary_draw() -> None:
    """Same uniforms, same winner: 64 rows of per-row knobs, bf16-rounded scores (ties included)."""
    gen = torch.Generator().manual_seed(0)
    rows, vocab = 64, 2048
    logits = (torch.randn(rows, vocab, generator=gen) * 3).bfloat16().float()
    temperature = torch.rand(rows, generator=gen) + 0.3
    top_k = torch.randint(1, 65, (rows,), generator=gen)
    top_p = torch.where(torch.arange(rows) % 3 == 0, torch.ones(rows), torch.rand(rows, generator=gen) * 0.9 + 0.05)
    knobs = TopKnobs.build(temperature, top_k.float(), top_p, 64)  # float columns, as a frame's knobs hold them
    for _ in range(5):
        noise = torch.rand(rows, vocab, generator=gen)
        full = draw(warp(logits, temperature, top_k, top_p), noise)
        assert torch.equal(draw_among_top(logits, knobs, exponentials(noise)), full)


def test_race_on_exponentials_is_the_draw() -> None:
    """A frame turns all its uniforms into exponentials once; racing on a slice of them is the row's own draw."""
    gen = torch.Generator().manual_seed(4)
    logits, noise = torch.randn(3, 5, 40, generator=gen), torch.rand(3, 5, 40, generator=gen)
    exps = exponentials(noise)
    for group in range(5):
        assert torch.equal(race(logits[:, group], exps[:, group]), draw(logits[:, group], noise[:, group]))
