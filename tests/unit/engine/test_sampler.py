"""Sampler: greedy, top-k/top-p/min-p masks, penalties, per-row seeded streams, logprobs."""
from __future__ import annotations

import math

import pytest
import torch

from runtime.engine.sampler import (MAX_TOP_LOGPROBS, NARROW_TOP_K, RowGenerators, _filter, _mask_sorted,
                                     apply_penalties, sample)
from runtime.engine.sampling_params import SamplingOptions

V = 32


def logits_for(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs]).log()


def kept(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> list[int]:
    out = _filter(logits, torch.tensor([top_k]), torch.tensor([top_p]), torch.tensor([min_p]))
    return torch.nonzero(torch.isfinite(out[0])).flatten().tolist()


def gens(seeds: list[int]) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in seeds]


def draw(logits: torch.Tensor, opts: SamplingOptions, seed: int, steps: int) -> list[int]:
    """`steps` tokens from one row's stream on the same logits."""
    g = torch.Generator().manual_seed(seed)
    return [sample(logits, [opts], [g], [[]], [[]]).token_ids[0] for _ in range(steps)]


def random_logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * 2


# --- greedy and masks ---------------------------------------------------------------------------------------------

def test_greedy_is_argmax_per_row() -> None:
    logits = random_logits(4)
    res = sample(logits, [SamplingOptions(temperature=0.0)] * 4, [None] * 4, [[]] * 4, [[]] * 4)
    assert res.token_ids == logits.argmax(-1).tolist()
    assert res.logprobs is None and res.top_ids is None and res.top_logprobs is None


def test_an_all_greedy_batch_picks_what_the_full_path_picks() -> None:
    """The all-greedy shortcut (no penalties, no logprobs) against the full path, forced by asking for logprobs."""
    logits = random_logits(6)
    plain = [SamplingOptions(temperature=0.0)] * 6
    with_lp = [SamplingOptions(temperature=0.0, logprobs=True)] * 6
    fast = sample(logits, plain, [None] * 6, [[]] * 6, [[]] * 6)
    full = sample(logits, with_lp, [None] * 6, [[]] * 6, [[]] * 6)
    assert fast.token_ids == full.token_ids and full.logprobs is not None


def test_greedy_ignores_masks_and_does_not_touch_a_generator() -> None:
    logits = random_logits(1)
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    opts = SamplingOptions(temperature=0.0, top_k=3, top_p=0.1, min_p=0.5)
    assert sample(logits, [opts], [g], [[]], [[]]).token_ids == [int(logits.argmax())]
    assert torch.equal(g.get_state(), state)


@pytest.mark.parametrize("seed", range(5))
def test_top_k_one_equals_greedy(seed: int) -> None:
    logits = random_logits(3, seed)
    opts = [SamplingOptions(temperature=1.5, top_k=1, seed=seed)] * 3
    res = sample(logits, opts, gens([seed, seed + 1, seed + 2]), [[]] * 3, [[]] * 3)
    assert res.token_ids == logits.argmax(-1).tolist()


def test_top_k_keeps_the_k_most_likely() -> None:
    logits = logits_for([0.1, 0.4, 0.2, 0.3])
    assert kept(logits, top_k=2) == [1, 3]
    assert kept(logits, top_k=0) == [0, 1, 2, 3]
    assert kept(logits, top_k=10) == [0, 1, 2, 3]


def test_top_p_keeps_the_smallest_prefix_reaching_p() -> None:
    logits = logits_for([0.05, 0.5, 0.15, 0.3])
    assert kept(logits, top_p=0.8) == [1, 3]  # 0.5 + 0.3 reaches 0.8: the 0.15 token is out
    assert kept(logits, top_p=0.81) == [1, 2, 3]
    assert kept(logits, top_p=0.5) == [1]
    assert kept(logits, top_p=1e-6) == [1]  # the most likely token always survives


def test_top_p_one_keeps_every_token_even_the_unlikely() -> None:
    # float32 cumsum hits 1.0 before the tail: top_p=1 must still mean "off".
    logits = torch.tensor([[0.0, -20.0, -20.0, -25.0, -30.0]])
    assert kept(logits, top_p=1.0) == [0, 1, 2, 3, 4]


def test_min_p_drops_tokens_below_a_share_of_the_top() -> None:
    logits = logits_for([0.05, 0.5, 0.15, 0.3])
    assert kept(logits, min_p=0.2) == [1, 2, 3]  # threshold 0.1
    assert kept(logits, min_p=0.35) == [1, 3]  # threshold 0.175
    assert kept(logits, min_p=1.0) == [1]


def test_masks_are_per_row() -> None:
    logits = torch.cat([logits_for([0.1, 0.4, 0.2, 0.3])] * 3)
    out = _filter(logits, torch.tensor([1, 0, 0]), torch.tensor([1.0, 0.6, 1.0]), torch.tensor([0.0, 0.0, 0.6]))
    assert torch.isfinite(out).tolist() == [[False, True, False, False], [False, True, False, True],
                                            [False, True, False, True]]


def test_kept_logits_keep_their_values() -> None:
    logits = random_logits(1)
    out = _filter(logits, torch.tensor([5]), torch.tensor([1.0]), torch.tensor([0.0]))
    finite = torch.isfinite(out)
    assert finite.sum() == 5 and torch.equal(out[finite], logits[finite])


def test_sampled_tokens_stay_inside_the_mask() -> None:
    logits = torch.cat([logits_for([0.05, 0.5, 0.15, 0.3])] * 64)
    opts = [SamplingOptions(temperature=1.0, top_p=0.8)] * 64
    res = sample(logits, opts, gens(list(range(64))), [[]] * 64, [[]] * 64)
    assert set(res.token_ids) == {1, 3}


def test_sampling_follows_the_distribution() -> None:
    probs = [0.1, 0.6, 0.3]
    n = 3000
    logits = torch.cat([logits_for(probs)] * n)
    res = sample(logits, [SamplingOptions(temperature=1.0)] * n, gens(list(range(n))), [[]] * n, [[]] * n)
    freq = [res.token_ids.count(i) / n for i in range(3)]
    assert freq == pytest.approx(probs, abs=0.04)


def test_temperature_sharpens_and_flattens() -> None:
    n = 1000
    logits = torch.cat([logits_for([0.2, 0.8])] * n)

    def share_of_top(t: float) -> float:
        res = sample(logits, [SamplingOptions(temperature=t)] * n, gens(list(range(n))), [[]] * n, [[]] * n)
        return res.token_ids.count(1) / n

    assert share_of_top(0.25) > 0.97  # 0.8^4 / (0.8^4 + 0.2^4) = 0.996
    assert share_of_top(1.0) == pytest.approx(0.8, abs=0.05)
    assert share_of_top(100.0) == pytest.approx(0.5, abs=0.06)


def test_top_p_applies_to_the_top_k_renormalised_distribution() -> None:
    # top_k=2 keeps {0.4, 0.3}; renormalised 0.571 + 0.429: top_p=0.5 keeps only the first.
    logits = logits_for([0.4, 0.3, 0.2, 0.1])
    # On the full distribution 0.4 < 0.5, so the code keeps the second as well.
    assert kept(logits, top_k=2, top_p=0.5) == [0]


# --- penalties ----------------------------------------------------------------------------------------------------

def test_repetition_penalty_divides_positive_and_multiplies_negative() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    out = apply_penalties(logits.clone(), [SamplingOptions(repetition_penalty=2.0)], [[0, 1, 0]], [[]])
    assert out.tolist() == [[1.0, -4.0, 1.0, 0.5]]


def test_repetition_penalty_below_one_encourages() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0]])
    out = apply_penalties(logits.clone(), [SamplingOptions(repetition_penalty=0.5)], [[0, 1]], [[]])
    assert out.tolist() == [[4.0, -1.0, 1.0]]


def test_presence_and_frequency_penalties_count_outputs() -> None:
    logits = torch.tensor([[1.0, 1.0, 1.0, 0.5]])
    opts = SamplingOptions(presence_penalty=0.5, frequency_penalty=0.25)
    out = apply_penalties(logits.clone(), [opts], [[]], [[2, 2, 3]])
    assert out[0].tolist() == pytest.approx([1.0, 1.0, 1.0 - 2 * 0.25 - 0.5, 0.5 - 0.25 - 0.5])


def test_negative_presence_penalty_rewards_repeats() -> None:
    logits = torch.zeros(1, 3)
    out = apply_penalties(logits, [SamplingOptions(presence_penalty=-1.0)], [[]], [[1]])
    assert out.tolist() == [[0.0, 1.0, 0.0]]


def test_penalties_skip_rows_without_them_and_empty_histories() -> None:
    logits = random_logits(3)
    opts = [SamplingOptions(), SamplingOptions(repetition_penalty=1.3), SamplingOptions(frequency_penalty=1.0)]
    out = apply_penalties(logits.clone(), opts, [[0, 1], [], []], [[0, 1], [], []])
    assert torch.equal(out, logits)


def test_penalties_change_the_greedy_choice() -> None:
    logits = torch.tensor([[3.0, 2.0, 0.0]])
    opts = SamplingOptions(temperature=0.0, frequency_penalty=1.5)
    assert sample(logits, [opts], [None], [[]], [[0]]).token_ids == [1]
    rep = SamplingOptions(temperature=0.0, repetition_penalty=2.0)
    assert sample(logits, [rep], [None], [[0]], [[]]).token_ids == [1]


@pytest.mark.parametrize("newest", [2, 7], ids=["seen-before", "new"])
def test_a_newest_token_on_the_device_counts_as_one_more_output(newest: int) -> None:
    """What the engine passes when it runs a step ahead: the latest output still on the device, out of the lists."""
    logits = random_logits(1)
    opts = [SamplingOptions(repetition_penalty=1.7, presence_penalty=0.5, frequency_penalty=0.25)]
    history, outputs = [0, 1, 2, 2], [2, 2]
    want = apply_penalties(logits.clone(), opts, [history + [newest]], [outputs + [newest]])
    got = apply_penalties(logits.clone(), opts, [history], [outputs], [torch.tensor([newest])])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    only = apply_penalties(logits.clone(), opts, [[]], [[]], [torch.tensor([newest])])  # nothing on the host yet
    torch.testing.assert_close(only, apply_penalties(logits.clone(), opts, [[newest]], [[newest]]), rtol=0, atol=0)


def test_sample_does_not_modify_the_callers_logits() -> None:
    logits = torch.tensor([[3.0, 2.0, 0.0]])
    before = logits.clone()
    sample(logits, [SamplingOptions(temperature=0.0, repetition_penalty=2.0)], [None], [[0]], [[0]])
    assert torch.equal(logits, before)


# --- seeded streams -----------------------------------------------------------------------------------------------

def test_same_seed_same_tokens_alone_or_batched() -> None:
    """A request's tokens depend on its seed and logits only, not on what else shares the batch."""
    steps = 12
    logits = random_logits(4, seed=1)
    opts = SamplingOptions(temperature=1.0, top_p=0.95, min_p=0.01)
    alone = draw(logits[2:3], opts, seed=1234, steps=steps)

    others = [SamplingOptions(temperature=0.7, top_k=5), SamplingOptions(temperature=0.0),
              SamplingOptions(temperature=1.3, seed=1234)]
    batched = []
    row_gen = torch.Generator().manual_seed(1234)
    other_gens = [torch.Generator().manual_seed(s) for s in (1234, 0, 99)]  # another row even shares the seed
    for i in range(steps):
        # The row moves around the batch from step to step, among rows of every kind.
        n_others = i % 3 + 1
        at = i % (n_others + 1)
        rows = [logits[j] for j in (0, 1, 3)[:n_others]]
        o = others[:n_others]
        g = [None if others[k].is_greedy else other_gens[k] for k in range(n_others)]
        rows.insert(at, logits[2])
        o.insert(at, opts)
        g.insert(at, row_gen)
        res = sample(torch.stack(rows), o, g, [[]] * len(o), [[]] * len(o))
        batched.append(res.token_ids[at])
    assert alone == batched


def test_different_seeds_give_different_streams() -> None:
    logits = torch.zeros(1, V)  # flat: every token equally likely
    opts = SamplingOptions(temperature=1.0)
    a, b = draw(logits, opts, 1, 20), draw(logits, opts, 2, 20)
    assert a != b
    assert a == draw(logits, opts, 1, 20)
    assert len(set(a)) > 5


def test_row_generators_keep_one_stream_per_sequence() -> None:
    gens_ = RowGenerators(torch.device("cpu"))
    g1 = gens_.get(1, seed=5)
    assert gens_.get(1, seed=999) is g1  # the seed only matters on first use
    fresh = torch.Generator().manual_seed(5)
    assert torch.equal(g1.get_state(), fresh.get_state())
    assert gens_.get(2, seed=5) is not g1
    gens_.drop(1)
    gens_.drop(1)  # twice is fine
    assert gens_.get(1, seed=6) is not g1


# --- logprobs -----------------------------------------------------------------------------------------------------

def test_logprobs_of_a_sampled_row_are_under_the_filtered_scaled_distribution() -> None:
    logits = random_logits(1, seed=4)
    opts = SamplingOptions(temperature=0.5, top_k=6, logprobs=True, top_logprobs=4)
    res = sample(logits, [opts], gens([0]), [[]], [[]])
    ref = torch.log_softmax(_filter(logits / 0.5, torch.tensor([6]), torch.tensor([1.0]), torch.tensor([0.0])), -1)
    tok = res.token_ids[0]
    assert math.isfinite(res.logprobs[0])
    assert res.logprobs[0] == pytest.approx(ref[0, tok].item(), abs=1e-6)
    vals, idx = torch.topk(ref[0], 4)
    assert res.top_ids[0] == idx.tolist()
    assert res.top_logprobs[0] == pytest.approx(vals.tolist(), abs=1e-6)


def test_logprobs_of_a_greedy_row_are_the_models() -> None:
    logits = random_logits(2, seed=5)
    opts = [SamplingOptions(temperature=0.0, top_k=2, logprobs=True, top_logprobs=3)] * 2
    res = sample(logits, opts, [None, None], [[], []], [[], []])
    ref = torch.log_softmax(logits, -1)
    assert res.logprobs == pytest.approx(ref.max(-1).values.tolist(), abs=1e-6)
    assert res.top_ids == torch.topk(ref, 3).indices.tolist()
    assert res.top_logprobs[0] == pytest.approx(torch.topk(ref[0], 3).values.tolist(), abs=1e-6)


def test_logprobs_come_after_penalties() -> None:
    logits = torch.tensor([[3.0, 2.0, 0.0]])
    opts = SamplingOptions(temperature=0.0, frequency_penalty=2.0, logprobs=True)
    res = sample(logits, [opts], [None], [[]], [[0]])
    ref = torch.log_softmax(torch.tensor([1.0, 2.0, 0.0]), -1)
    assert res.token_ids == [1] and res.logprobs[0] == pytest.approx(ref[1].item(), abs=1e-6)


def test_top_logprobs_take_the_largest_request_and_are_capped() -> None:
    logits = random_logits(2)
    opts = [SamplingOptions(temperature=0.0, top_logprobs=2), SamplingOptions(temperature=0.0, top_logprobs=50)]
    res = sample(logits, opts, [None, None], [[], []], [[], []])
    assert res.logprobs is None  # nobody asked for the sampled token's own logprob
    assert [len(r) for r in res.top_ids] == [MAX_TOP_LOGPROBS, MAX_TOP_LOGPROBS]


def test_an_empty_batch_samples_nothing() -> None:
    # A step of prefill chunks only (a prompt longer than the token budget) has no row that samples.
    res = sample(torch.zeros(0, V), [], [], [], [])
    assert res.token_ids == [] and res.logprobs is None and res.top_ids is None


# --- the narrow path: rows whose top-k keeps at most NARROW_TOP_K tokens ------------------------------------------

def test_narrow_rows_keep_what_the_full_filter_keeps() -> None:
    """The narrow path masks a top-k of the vocabulary; the full one a sort of it: the same tokens survive."""
    vocab = 1000
    logits = torch.randn(6, vocab, generator=torch.Generator().manual_seed(3)) * 3
    knobs = [(1, 1.0, 0.0), (20, 0.8, 0.0), (20, 1.0, 0.05), (64, 0.9, 0.0), (5, 0.5, 0.1), (64, 1.0, 0.0)]
    top_k, top_p, min_p = (torch.tensor(col) for col in zip(*knobs))
    full = torch.isfinite(_filter(logits, top_k, top_p, min_p))
    values, ids = torch.topk(logits, NARROW_TOP_K, dim=-1)
    narrow = torch.isfinite(_mask_sorted(values, top_k, top_p, min_p))
    for row in range(len(knobs)):
        assert set(ids[row][narrow[row]].tolist()) == set(torch.nonzero(full[row]).flatten().tolist())


def test_narrow_rows_follow_the_renormalised_top_k() -> None:
    probs = [0.05, 0.4, 0.1, 0.25, 0.2]
    n = 3000
    logits = torch.cat([logits_for(probs)] * n)
    res = sample(logits, [SamplingOptions(temperature=1.0, top_k=3)] * n, gens(list(range(n))), [[]] * n, [[]] * n)
    freq = [res.token_ids.count(i) / n for i in range(5)]
    assert freq == pytest.approx([0.0, 0.4 / 0.85, 0.0, 0.25 / 0.85, 0.2 / 0.85], abs=0.04)


def test_a_narrow_seed_gives_the_same_tokens_alone_or_batched_with_every_kind_of_row() -> None:
    steps = 10
    logits = random_logits(4, seed=2) / 6  # flat enough that top-p 0.8 keeps several
    opts = SamplingOptions(temperature=0.7, top_k=20, top_p=0.8, seed=7)  # the model's defaults
    alone = draw(logits[0:1], opts, seed=7, steps=steps)
    others = [SamplingOptions(temperature=1.0), SamplingOptions(temperature=0.0),
              SamplingOptions(temperature=1.0, top_k=10, logprobs=True)]  # full, greedy, narrow knobs with logprobs
    row_gen = torch.Generator().manual_seed(7)
    batched = []
    for i in range(steps):
        o = [opts, *others][: i % 4 + 1]
        g = [row_gen] + [None if x.is_greedy else torch.Generator().manual_seed(i) for x in o[1:]]
        res = sample(logits[: len(o)], o, g, [[]] * len(o), [[]] * len(o))
        batched.append(res.token_ids[0])
    assert alone == batched
    assert len(set(alone)) > 1  # it samples


def test_unseeded_narrow_rows_draw_from_the_global_stream() -> None:
    logits = torch.zeros(200, V)
    res = sample(logits, [SamplingOptions(temperature=1.0, top_k=8)] * 200, [None] * 200, [[]] * 200, [[]] * 200)
    assert len(set(res.token_ids)) == 8  # every one of the 8 kept, equally likely tokens comes up


def test_a_narrow_draw_follows_the_token_not_its_rank_among_ties(monkeypatch: pytest.MonkeyPatch) -> None:
    """topk may return tied logits in another order for another batch shape (the GPU's kernels differ by shape):
    each token keeps its own draw, so the pick does not change."""
    logits = torch.full((1, V), -5.0)
    logits[0, [3, 9, 17, 25]] = 1.0  # four tied favourites
    opts = [SamplingOptions(temperature=1.0, top_k=4)]
    in_order = [sample(logits, opts, gens([seed]), [[]], [[]]).token_ids[0] for seed in range(8)]
    topk = torch.topk

    def ties_reversed(x: torch.Tensor, k: int, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        values, ids = topk(x, k, dim=dim)
        return values, torch.cat([ids[:, :4].flip(1), ids[:, 4:]], dim=1)  # the four tied ones the other way round

    monkeypatch.setattr(torch, "topk", ties_reversed)
    reversed_ties = [sample(logits, opts, gens([seed]), [[]], [[]]).token_ids[0] for seed in range(8)]
    assert reversed_ties == in_order and len(set(in_order)) > 1
