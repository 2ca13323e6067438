"""TalkerRunner on a tiny random talker: frame limits, slots, waiting for text, cancel, and sampleable ids."""
from __future__ import annotations

import pytest
import torch

from runtime.checkpoint import token_ids as T
from runtime.errors import InvalidArgument
from services.talker.model.generate import RowStart, TalkerRunner, TalkerState
from tests.talker_lockstep import lockstep_generate
from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import GREEDY, TalkerSampling
from tests.unit.talker.talker_tiny import tiny_talker

EOS = frozenset({T.IM_END})
PROMPT = SpeechPrompt([T.IM_START, T.USER, T.NEWLINE, 5, 6, T.IM_END, T.NEWLINE, T.IM_START, T.ASSISTANT, T.NEWLINE])


@pytest.fixture(scope="module")
def model() -> TalkerModel:
    return tiny_talker()


def test_max_frames_and_slot_release(model: TalkerModel) -> None:
    runner = TalkerRunner(model, max_rows=1, max_len=40)
    state = runner.start(PROMPT, 11, max_frames=3)
    state.finish_text()
    frames = [runner.step([state]) for _ in range(3)]
    assert state.finished and state.num_frames == 3 and runner.kv.free_slots == [0]
    assert all(f.shape == (1, 16) for f in frames)
    with pytest.raises(RuntimeError, match="finished row"):
        runner.step([state])


def test_step_waits_for_thinker_text(model: TalkerModel) -> None:
    runner = TalkerRunner(model, max_rows=1, max_len=40)
    state = runner.start(PROMPT, 11)
    with pytest.raises(RuntimeError, match="waiting for thinker text"):
        runner.step([state])
    state.push_text(12)
    runner.step([state])
    assert state.cache_len == 7 + 9 + 1  # user turn + assistant preamble + one step


def test_cancel_frees_the_slot(model: TalkerModel) -> None:
    runner = TalkerRunner(model, max_rows=2, max_len=40)
    a, b = runner.start(PROMPT, 11), runner.start(PROMPT, 12)
    runner.release(a)
    assert a.finished and a.slot == -1 and len(runner.kv.free_slots) == 1 and not b.finished


def test_thinker_that_wrote_nothing_still_speaks_its_end(model: TalkerModel) -> None:
    (result,) = lockstep_generate(model, [PROMPT], [iter([])], max_frames=4)
    assert result.codes.shape[0] == 16 and result.codes.shape[1] <= 4


def test_sampled_codes_stay_in_the_codebook(model: TalkerModel) -> None:
    sampling = TalkerSampling(temperature=5.0, top_k=0, seed=3)  # flat: every unsuppressed id is likely
    (result,) = lockstep_generate(model, [PROMPT], [iter(range(20, 40))], [sampling], max_frames=30)
    assert int(result.codes.max()) < model.cfg.code_predictor.vocab_size


def test_unseeded_requests_get_their_own_streams(model: TalkerModel) -> None:
    a, b = lockstep_generate(model, [PROMPT, PROMPT], [iter(range(20, 40))] * 2, [TalkerSampling()] * 2, max_frames=6)
    assert not torch.equal(a.codes, b.codes)


LONG = SpeechPrompt([T.IM_START, T.USER, T.NEWLINE, *range(5, 17), T.IM_END, T.NEWLINE, T.IM_START, T.ASSISTANT,
                     T.NEWLINE], "aiden")


@pytest.mark.parametrize("fast", [False, True], ids=["reference-step", "fast-step"])
def test_rows_started_in_one_prefill_speak_as_if_started_alone(model: TalkerModel, fast: bool) -> None:
    """Different prompt lengths (right padding), voices and a seeded sampler: codes equal one row per prefill."""
    prompts, texts = [PROMPT, LONG], [list(range(20, 28)), [30, 31, T.IM_END]]
    samplings = [TalkerSampling(seed=5), GREEDY]
    runner = TalkerRunner(model, max_rows=2, max_len=64, fast=fast)
    states = runner.start_many([RowStart(p, t[0], s, max_frames=6, thinker_eos=EOS)
                                for p, t, s in zip(prompts, texts, samplings)])
    assert [s.cache_len for s in states] == [7 + 9, 17 + 9]  # each row's own length, not the padded one
    frames: list[list[torch.Tensor]] = [[], []]
    for state, text in zip(states, texts):
        for t in text[1:]:
            state.push_text(t)
        state.finish_text()
    while live := [i for i, s in enumerate(states) if not s.finished]:
        for i, row in zip(live, runner.step([states[i] for i in live])):
            frames[i].append(row)
    for prompt, text, sampling, got in zip(prompts, texts, samplings, frames):
        (alone,) = lockstep_generate(model, [prompt], [iter(text)], [sampling], max_frames=6, thinker_eos=EOS)
        assert torch.equal(torch.stack(got, dim=1), alone.codes)


def test_a_refused_prompt_fails_alone_and_takes_no_slot(model: TalkerModel) -> None:
    runner = TalkerRunner(model, max_rows=2, max_len=64)
    bad = SpeechPrompt(PROMPT.prompt_ids[:-3])  # no assistant header
    refused, started = runner.start_many([RowStart(bad, 11), RowStart(PROMPT, 11)])
    assert isinstance(refused, InvalidArgument) and "assistant" in str(refused)
    assert isinstance(started, TalkerState) and started.cache_len == 7 + 9 and len(runner.kv.free_slots) == 1


@pytest.mark.parametrize("fast", [False, True], ids=["reference-step", "fast-step"])
def test_warm_up_leaves_every_slot_free_and_changes_no_output(model: TalkerModel, fast: bool) -> None:
    runner = TalkerRunner(model, max_rows=3, max_len=64, fast=fast)
    runner.warm_up()
    assert sorted(runner.kv.free_slots) == [0, 1, 2] and not runner.has_pending
    state = runner.start(PROMPT, 20, TalkerSampling(seed=4), max_frames=5)
    for t in range(21, 30):
        state.push_text(t)
    got = [runner.step([state]) for _ in range(5)]
    (fresh,) = lockstep_generate(model, [PROMPT], [iter(range(20, 30))], [TalkerSampling(seed=4)], max_frames=5)
    assert torch.equal(torch.cat(got).T, fresh.codes)
