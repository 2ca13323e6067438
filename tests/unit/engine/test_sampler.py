"""The thinker's sampler: greedy, the masks through launch_sample, penalties, per-row seeded streams, logprobs (the
masks' rules themselves: tests/unit/sampler)."""
from __future__ import annotations

import math

import pytest
import torch

from runtime.engine.sampler import MAX_TOP_LOGPROBS, apply_penalties, sample
from runtime.engine.sampling_params import SamplingOptions
from runtime.sampler.knobs import WIDTH
from runtime.sampler.rules import filter_logits

V = 32


def logits_for(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs]).log()


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




# --- logprobs -----------------------------------------------------------------------------------------------------

def test_logprobs_of_a_sampled_row_are_under_the_filtered_scaled_distribution() -> None:
    logits = random_logits(1, seed=4)
    opts = SamplingOptions(temperature=0.5, top_k=6, logprobs=True, top_logprobs=4)
    res = sample(logits, [opts], gens([0]), [[]], [[]])
    ref = torch.log_softmax(filter_logits(logits / 0.5, torch.tensor([6]), torch.tensor([1.0])), -1)
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


# --- the narrow path: rows whose top-k keeps at most WIDTH tokens ------------------------------------------------

def test_a_narrow_row_draws_what_the_sort_of_the_vocabulary_draws() -> None:
    """The same options with logprobs take the sort of the vocabulary instead: each row's stream gives one uniform
    per vocabulary id on either path, so the same seeds give the same tokens."""
    logits = random_logits(6, seed=3) / 3
    knobs = [(1, 1.0, 0.0), (20, 0.8, 0.0), (20, 1.0, 0.05), (WIDTH, 0.9, 0.0), (5, 0.5, 0.1), (WIDTH, 1.0, 0.0)]
    narrow = [SamplingOptions(temperature=0.8, top_k=k, top_p=p, min_p=m) for k, p, m in knobs]
    wide = [SamplingOptions(temperature=0.8, top_k=k, top_p=p, min_p=m, logprobs=True) for k, p, m in knobs]
    for seed in range(4):
        seeds = [seed * 10 + i for i in range(6)]
        got = sample(logits, narrow, gens(seeds), [[]] * 6, [[]] * 6).token_ids
        assert got == sample(logits, wide, gens(seeds), [[]] * 6, [[]] * 6).token_ids



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
    logits = torch.full((200, V), -30.0)
    logits[:, 8:16] = 0.0  # 8 equally likely favourites (a flat row would keep all: ties with the 8th stay)
    res = sample(logits, [SamplingOptions(temperature=1.0, top_k=8)] * 200, [None] * 200, [[]] * 200, [[]] * 200)
    assert set(res.token_ids) == set(range(8, 16))  # every one of the 8 kept tokens comes up


def test_a_narrow_draw_follows_the_token_not_its_rank_among_ties(monkeypatch: pytest.MonkeyPatch) -> None:
    """topk may return tied logits in another order for another batch shape (the GPU's kernels differ by shape):
    each token keeps its own draw, so the pick does not change."""
    logits = torch.full((1, V), -5.0)
    logits[0, [3, 9, 17, 25]] = 1.0  # four tied favourites
    opts = [SamplingOptions(temperature=1.0, top_k=4)]
    in_order = [sample(logits, opts, gens([seed]), [[]], [[]]).token_ids[0] for seed in range(8)]
    topk = torch.Tensor.topk

    def ties_reversed(x: torch.Tensor, k: int, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        values, ids = topk(x, k, dim=dim)
        return values, torch.cat([ids[:, :4].flip(1), ids[:, 4:]], dim=1)  # the four tied ones the other way round

    monkeypatch.setattr(torch.Tensor, "topk", ties_reversed)
    reversed_ties = [sample(logits, opts, gens([seed]), [[]], [[]]).token_ids[0] for seed in range(8)]
    assert reversed_ties == in_order and len(set(in_order)) > 1
