"""The sampler's torch rules (runtime/sampler/rules.py) against transformers' warpers, the parity reference; the draw
among the best `width` against the full-vocabulary draw; the edge cases of top-k, top-p and min-p."""
from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
)

from runtime.sampler.knobs import RowKnobs
from runtime.sampler.penalty import penalize
from runtime.sampler.rules import draw_among, filter_logits, pick_reference, race
from runtime.sampler.streams import RowGenerators, row_uniforms


def kept(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> list[int]:
    rows = logits.shape[0]
    out = filter_logits(logits, torch.full((rows,), top_k), torch.full((rows,), top_p, dtype=torch.float64),
                        torch.full((rows,), min_p))
    return torch.nonzero(out[0].isfinite()).flatten().tolist()


def transformers_warp(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float
                      ) -> torch.Tensor:  # fmt: skip
    """What `generate` applies, in its order: temperature, top-k, top-p, min-p."""
    out = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        out = TopKLogitsWarper(top_k)(None, out)
    if top_p < 1:
        out = TopPLogitsWarper(top_p)(None, out)
    if min_p:
        out = MinPLogitsWarper(min_p)(None, out)
    return out


def test_penalty_matches_transformers() -> None:
    g = torch.Generator().manual_seed(0)
    logits, history = torch.randn(2, 50, generator=g), torch.randint(0, 50, (2, 12), generator=g)
    seen = torch.zeros(2, 50, dtype=torch.bool).scatter(1, history, True)
    ref = RepetitionPenaltyLogitsProcessor(1.05)(history, logits.clone())
    assert torch.equal(penalize(logits, seen, torch.tensor([1.05, 1.05])), ref)
    assert torch.equal(penalize(logits, seen, 1.05), ref)  # one value for every row (the thinker's)


@pytest.mark.parametrize(("temperature", "top_k", "top_p", "min_p"), [
    (0.9, 50, 1.0, 0.0), (1.0, 50, 0.8, 0.0), (0.7, 5, 0.5, 0.0), (1.0, 0, 0.9, 0.0), (0.7, 20, 0.8, 0.05),
    (1.3, 0, 1.0, 0.1), (1.0, 0, 0.95, 0.01),
])  # fmt: skip
def test_filter_matches_transformers(temperature: float, top_k: int, top_p: float, min_p: float) -> None:
    logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(1)) * 3
    ref = transformers_warp(logits, temperature, top_k, top_p, min_p)
    ours = filter_logits(logits / temperature, torch.full((3,), top_k), torch.full((3,), top_p, dtype=torch.float64),
                         torch.full((3,), min_p))
    assert torch.equal(ours.isinf(), ref.isinf())
    assert torch.allclose(ours[~ours.isinf()], ref[~ref.isinf()])


def test_top_p_is_transformers_ascending_mass() -> None:
    """The boundary cases, where "mass before a token >= top_p" and "mass at and below it <= 1 - top_p" round apart
    in float32: the kept set is the one TopPLogitsWarper keeps."""
    logits = torch.tensor([[0.05, 0.5, 0.15, 0.3]]).log()
    for top_p in (0.8, 0.81, 0.5, 0.35, 0.2, 1e-6, 0.999):
        ref = TopPLogitsWarper(top_p)(None, logits.clone())
        assert kept(logits, top_p=top_p) == torch.nonzero(ref[0].isfinite()).flatten().tolist(), top_p
    assert kept(logits, top_p=0.81) == [1, 2, 3]
    assert kept(logits, top_p=1e-6) == [1]  # the most likely token always stays


def test_top_p_one_keeps_every_token_even_the_unlikely() -> None:
    logits = torch.tensor([[0.0, -20.0, -20.0, -25.0, -30.0]])  # float32 cumsums reach 1 before the tail
    assert kept(logits, top_p=1.0) == [0, 1, 2, 3, 4]


def test_top_k_keeps_ties_with_the_kth() -> None:
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.5]])
    assert kept(logits, top_k=2) == [0, 2, 3]  # as TopKLogitsWarper: every score >= the k-th stays
    assert kept(logits, top_k=1) == [0]
    assert kept(logits, top_k=0) == [0, 1, 2, 3, 4] and kept(logits, top_k=10) == [0, 1, 2, 3, 4]


def test_min_p_drops_tokens_below_a_share_of_the_best() -> None:
    logits = torch.tensor([[0.05, 0.5, 0.15, 0.3]]).log()
    assert kept(logits, min_p=0.2) == [1, 2, 3]  # threshold 0.1
    assert kept(logits, min_p=0.35) == [1, 3]  # threshold 0.175
    assert kept(logits, min_p=1.0) == [1]


def test_top_p_reads_the_top_k_renormalised_distribution() -> None:
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    assert kept(logits, top_k=2, top_p=0.5) == [0]  # {0.4, 0.3} renormalised: 0.571 alone reaches 0.5


def test_settings_are_per_row() -> None:
    logits = torch.tensor([[0.1, 0.4, 0.2, 0.3]]).log().repeat(3, 1)
    out = filter_logits(logits, torch.tensor([1, 0, 0]), torch.tensor([1.0, 0.6, 1.0]), torch.tensor([0.0, 0.0, 0.6]))
    assert out.isfinite().tolist() == [[False, True, False, False], [False, True, False, True],
                                       [False, True, False, True]]


def test_the_race_follows_the_distribution() -> None:
    logits = torch.tensor([[0.0, 1.0, 2.0, float("-inf")]])
    g = torch.Generator().manual_seed(3)
    draws = torch.cat([race(logits, torch.rand(1, 4, generator=g)) for _ in range(20000)])
    counts = torch.bincount(draws, minlength=4)
    assert counts[3] == 0
    assert torch.allclose(counts[:3] / 20000.0, logits[0, :3].softmax(-1), atol=0.015)


def narrow_case(rows: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                            torch.Tensor]:  # fmt: skip
    """bf16-rounded scores (ties included) and per-row temperature, top_k in 1..64, top_p, min_p."""
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=gen) * 3).bfloat16().float()
    temperature = torch.rand(rows, generator=gen) + 0.3
    top_k = torch.randint(1, 65, (rows,), generator=gen)
    top_p = torch.where(torch.arange(rows) % 3 == 0, torch.ones(rows), torch.rand(rows, generator=gen) * 0.9 + 0.05)
    min_p = torch.where(torch.arange(rows) % 2 == 0, torch.zeros(rows), torch.rand(rows, generator=gen) * 0.2)
    return logits, temperature, top_k, top_p, min_p


def test_the_draw_among_the_best_is_the_full_vocabulary_draw() -> None:
    """Same uniforms, same token: the narrow path saves the sort of the vocabulary, nothing else."""
    logits, temperature, top_k, top_p, min_p = narrow_case(64, 2048, seed=0)
    knobs = RowKnobs.build(torch.ones(64), temperature, top_k.float(), top_p, min_p)  # float columns, as a frame's
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        uniforms = torch.rand(64, 2048, generator=gen)
        full = race(filter_logits(logits / temperature[:, None], top_k, top_p, min_p), uniforms)
        assert torch.equal(pick_reference(logits, uniforms, knobs), full)


def test_greedy_rows_take_the_argmax_and_top_k_one_is_greedy() -> None:
    logits, temperature, top_k, top_p, min_p = narrow_case(16, 500, seed=2)
    uniforms = torch.rand(16, 500, generator=torch.Generator().manual_seed(3))
    sample = torch.arange(16) % 2 == 0
    mixed = pick_reference(logits, uniforms, RowKnobs.build(sample, temperature, top_k, top_p, min_p))
    assert torch.equal(mixed[~sample], logits[~sample].argmax(dim=-1))
    ones = pick_reference(logits, uniforms, RowKnobs.build(torch.ones(16), temperature, torch.ones(16), top_p, min_p))
    assert torch.equal(ones, logits.argmax(dim=-1))
    tiny = pick_reference(logits, uniforms, RowKnobs.build(torch.ones(16), temperature, top_k,
                                                           torch.full((16,), 1e-9), min_p))
    assert torch.equal(tiny, logits.argmax(dim=-1))  # 1 - 1e-9 is 1 in float32: only the best stays


def test_a_draw_follows_the_token_not_its_rank_among_ties() -> None:
    """topk may return tied scores in another order for another batch shape: the candidates are ordered by id
    before the rules run, so the token drawn does not change."""
    logits = torch.full((1, 300), -5.0)
    logits[0, [3, 9, 17, 25]] = 1.0
    knobs = RowKnobs.build(torch.ones(1), torch.ones(1), torch.full((1,), 4), torch.full((1,), 0.6))
    for seed in range(8):
        uniforms = torch.rand(1, 300, generator=torch.Generator().manual_seed(seed))
        values, ids = logits.topk(64)
        in_order = draw_among(values, ids, uniforms, knobs)
        assert torch.equal(draw_among(values.flip(-1), ids.flip(-1), uniforms, knobs), in_order)


def test_a_seeded_row_draws_alike_alone_or_batched() -> None:
    alone = row_uniforms([torch.Generator().manual_seed(5)], 1000, torch.device("cpu"))
    batched = row_uniforms([None, torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)], 1000,
                           torch.device("cpu"))
    assert torch.equal(batched[1], alone[0]) and not torch.equal(batched[2], alone[0])


def test_row_generators_keep_one_stream_per_sequence() -> None:
    gens = RowGenerators(torch.device("cpu"))
    g1 = gens.get(1, seed=5)
    assert gens.get(1, seed=999) is g1  # the seed only matters on first use
    assert torch.equal(g1.get_state(), torch.Generator().manual_seed(5).get_state())
    assert gens.get(2, seed=5) is not g1
    gens.drop(1)
    gens.drop(1)  # twice is fine
    assert gens.get(1, seed=6) is not g1


def test_settings_from_the_host_build_the_same_table() -> None:
    """The thinker's one-upload table equals the device-built one from float64 columns (top_p's floor included)."""
    rows = [(True, 0.7, 20, 0.8, 0.0), (True, 1.3, 64, 1.0, 0.05), (False, 1.0, 0, 0.95, 0.0), (True, 0.5, 99, 1e-9, 1.0)]
    host = RowKnobs.from_settings(rows, torch.device("cpu"))
    columns = torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64).unbind(1)
    assert torch.equal(host.table, RowKnobs.build(*columns).table)
