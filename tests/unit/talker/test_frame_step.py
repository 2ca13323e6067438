"""The fast talker frame (FrameStep through FrameGraphs' static buckets) makes the reference loop's choices.

On CPU the kernels take their PyTorch references and FrameGraphs runs its static buffers eagerly, so these tests
check the fast step's math, its bucket padding and its host bookkeeping; tests/parity/talker/test_talker_gpu.py
checks the captured graphs on CUDA.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runtime.checkpoint import token_ids as T
from services.talker.model.frame_graphs import batch_buckets
from services.talker.model.frame_step import DENSE_ROWS, SKINNY_ROWS, DecodeLinear, frame_mode
from services.talker.model.generate import TalkerRunner
from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import GREEDY, TalkerSampling
from tests.unit.talker.talker_tiny import tiny_talker

VOICES = ("ethan", "chelsie", "aiden")


def prompt(i: int) -> SpeechPrompt:
    ids = [T.IM_START, T.USER, T.NEWLINE, 5 + i, 6, 7 + 2 * i, T.IM_END, T.NEWLINE, T.IM_START, T.ASSISTANT, T.NEWLINE]
    return SpeechPrompt(ids, VOICES[i % 3])


@pytest.fixture(scope="module")
def model() -> TalkerModel:
    return tiny_talker()


def speak(model: TalkerModel, fast: bool, samplings: list[TalkerSampling], max_frames: list[int],
          text_len: list[int], max_rows: int = 4, skinny_gemms: bool = False, dense: bool = False,
          ) -> tuple[list[list[list[int]]], TalkerRunner]:  # fmt: skip
    """Rows start together, run out of text at different times and stop at their own frame limits.

    `skinny_gemms`: the fast step's few-row GEMMs go to the skinny GEMM as on CUDA (its reference here).
    `dense`: the code predictor's steps through the persistent step's entry (its PyTorch reference here)."""
    runner = TalkerRunner(model, max_rows, 60, fast=fast)
    if skinny_gemms:
        assert runner.frames is not None
        runner.frames.step.linear.enabled = True
    if dense:
        assert runner.frames is not None
        runner.frames.step.set_dense_rows(DENSE_ROWS)
    runner.suppress[model.cfg.tokens.codec_eos] = True  # the tiny random talker would stop at once otherwise
    states = [runner.start(prompt(i), 20 + i, smp, max_frames=m)
              for i, (smp, m) in enumerate(zip(samplings, max_frames))]  # fmt: skip
    for s, n in zip(states, text_len):
        for t in range(n):
            s.push_text(100 + t)
        s.finish_text()
    out: list[list[list[int]]] = [[] for _ in states]
    while active := [i for i, s in enumerate(states) if not s.finished]:
        frames = runner.step([states[i] for i in active])
        for i, row in zip(active, frames):
            out[i].append(row.tolist())
    return out, runner


@pytest.mark.parametrize("samplings", [
    [GREEDY] * 3,
    [TalkerSampling(seed=1), GREEDY, TalkerSampling(seed=3, top_k=5, top_p=0.7, repetition_penalty=1.3)],
    [TalkerSampling(seed=2, top_k=0, predictor_top_k=0), TalkerSampling(seed=4), GREEDY],
], ids=["greedy", "top-k", "full-vocabulary"])  # fmt: skip
def test_fast_frames_equal_the_reference_loop(model: TalkerModel, samplings: list[TalkerSampling]) -> None:
    """Three rows in a bucket of four (one padding row), leaving at 5, 9 and 12 frames."""
    ref, _ = speak(model, False, samplings, [12, 5, 9], [3, 8, 1])
    got, runner = speak(model, True, samplings, [12, 5, 9], [3, 8, 1])
    assert [len(r) for r in got] == [12, 5, 9]
    assert got == ref
    assert sorted(runner.kv.free_slots) == [0, 1, 2, 3]


def test_skinny_gemm_rows_keep_the_reference_frames(model: TalkerModel) -> None:
    samplings = [TalkerSampling(seed=1), GREEDY, TalkerSampling(seed=3, top_k=5, top_p=0.7)]
    ref, _ = speak(model, False, samplings, [6, 4, 5], [3, 2, 1])
    got, _ = speak(model, True, samplings, [6, 4, 5], [3, 2, 1], skinny_gemms=True)
    assert got == ref


def test_dense_predictor_steps_keep_the_reference_frames(model: TalkerModel) -> None:
    samplings = [TalkerSampling(seed=1), GREEDY, TalkerSampling(seed=3, top_k=5, top_p=0.7)]
    ref, _ = speak(model, False, samplings, [6, 4, 5], [3, 2, 1])
    got, runner = speak(model, True, samplings, [6, 4, 5], [3, 2, 1], dense=True)
    assert got == ref
    assert runner.frames is not None and runner.frames.step.dense is not None


def test_dense_rows_out_of_range_are_refused(model: TalkerModel) -> None:
    runner = TalkerRunner(model, 2, 60, fast=True)
    assert runner.frames is not None and runner.frames.step.dense is None  # layer by layer unless asked
    for rows in (-1, DENSE_ROWS + 1):
        with pytest.raises(ValueError, match=f"dense_rows={rows}: must be in 0..{DENSE_ROWS}"):
            runner.frames.step.set_dense_rows(rows)


def test_decode_linear_takes_the_skinny_gemm_up_to_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.talker.model.frame_step as frame_step

    calls: list[int] = []
    monkeypatch.setattr(frame_step, "skinny_linear", lambda x, w: calls.append(x.shape[0]) or F.linear(x, w))
    weight = torch.randn(24, 16)
    for enabled in (True, False):
        linear = DecodeLinear(enabled)
        for rows in (1, SKINNY_ROWS, SKINNY_ROWS + 1):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(linear(x, weight), F.linear(x, weight))
    assert calls == [1, SKINNY_ROWS]  # enabled, and within its rows only


def test_frame_mode_is_the_cheapest_exact_one() -> None:
    assert frame_mode([GREEDY, TalkerSampling(do_sample=False, top_k=0)]) == "greedy"
    assert frame_mode([GREEDY, TalkerSampling(top_k=64, predictor_top_k=1)]) == "topk"
    assert frame_mode([TalkerSampling(), TalkerSampling(predictor_top_k=65)]) == "full"
    assert frame_mode([TalkerSampling(top_k=0)]) == "full"


def test_padding_rows_never_touch_a_real_slot(model: TalkerModel) -> None:
    runner = TalkerRunner(model, 4, 60, fast=True)
    idle = runner.start(prompt(0), 20, max_frames=50)  # holds a slot but sits out the steps below
    busy = runner.start(prompt(1), 21, max_frames=50)
    busy.finish_text()
    kv_before = [layer.clone() for layer in runner.kv.layers]
    seen_before = runner.seen[idle.slot].clone()
    for _ in range(3):
        runner.step([busy])  # one row in a bucket of one: then 2 rows would use bucket 2 and so on
    runner.frames.buckets = (4,)  # force padding: one real row, three padding rows
    runner.step([busy])
    stride = runner.kv.slot_stride
    for before, after in zip(kv_before, runner.kv.layers):
        flat_before, flat_after = before.flatten(1, 2), after.flatten(1, 2)
        rows = slice(idle.slot * stride, (idle.slot + 1) * stride)
        assert torch.equal(flat_before[:, rows], flat_after[:, rows])
    assert torch.equal(runner.seen[idle.slot], seen_before)


def test_buckets_cover_every_batch_size(model: TalkerModel) -> None:
    assert batch_buckets(1) == (1,)
    assert batch_buckets(32) == (1, 2, 4, 8, 16, 32)
    assert batch_buckets(24) == (1, 2, 4, 8, 16, 24)
    runner = TalkerRunner(model, 3, 60, fast=True)
    assert runner.frames is not None and runner.frames.bucket_for(3) == 3
    with pytest.raises(ValueError, match="exceed the largest frame graph bucket 3"):
        runner.frames.bucket_for(4)


def test_fast_step_refuses_a_full_slot(model: TalkerModel) -> None:
    runner = TalkerRunner(model, 1, 18, fast=True)  # the prefill takes 17 positions: room for one frame
    state = runner.start(prompt(0), 20, max_frames=50)
    state.finish_text()
    with pytest.raises(RuntimeError, match="KVPool capacity 18 < 19"):
        for _ in range(5):
            runner.step([state])


def test_codec_eos_ends_rows_alike_when_the_codes_are_read_late(model: TalkerModel) -> None:
    """From the fifth frame on only the codec EOS may be picked: every row ends on it. The fast runner, stepped
    with `defer` and settled before each next step (as the engine drives it), emits the same frames."""
    eos = model.cfg.tokens.codec_eos
    results = []
    for fast in (False, True):
        runner = TalkerRunner(model, 4, 60, fast=fast, defer=fast)
        samplings = [TalkerSampling(seed=1), GREEDY, TalkerSampling(seed=3, top_k=5)]
        states = [runner.start(prompt(i), 20 + i, smp, max_frames=40) for i, smp in enumerate(samplings)]
        for s in states:
            s.push_text(100)
            s.finish_text()
        frames: list[list[list[int]]] = [[] for _ in states]
        step = 0
        while active := [i for i, s in enumerate(states) if not s.finished]:
            if step == 4:
                runner.suppress.fill_(True)
                runner.suppress[eos] = False
            for i, row in zip(active, runner.step([states[i] for i in active])):
                frames[i].append(row.tolist())
            runner.settle()
            step += 1
        assert all(s.code0 == eos and s.slot == -1 for s in states)
        results.append(frames)
    assert results[0] == results[1]
    assert [len(f) for f in results[1]] == [5, 5, 5]  # frame 5 carries the code 0 picked before the switch
