"""SpeechCore on EngineLoop, in-process on a tiny talker: what lockstep_generate says, in chunks, batched,
cancellable, failing loudly rather than hanging."""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from collections.abc import Iterator

import pytest
import torch

from runtime.checkpoint import token_ids as T
from runtime.config import SpeechConfig
from runtime.engine.engine_loop import EngineLoop
from runtime.engine.request_stream import RequestStream
from runtime.engine.step_core import CoreLoad
from runtime.errors import InvalidArgument, Unavailable
from runtime.metrics import Metrics
from services.talker.model.generate import TalkerRunner
from tests.talker_lockstep import lockstep_generate
from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import GREEDY, TalkerSampling
from services.talker.request import AudioOut, FinishedOut, SpeakInput, SpeechFinish
from services.talker.speech_core import MoreText, SpeechCore, TextEnd
from tests.unit.talker.talker_tiny import tiny_talker

PROMPT = [T.IM_START, T.USER, T.NEWLINE, 5, 6, T.IM_END, T.NEWLINE, T.IM_START, T.ASSISTANT, T.NEWLINE]
EOS = frozenset({T.IM_END})
FRAMES = 12
SPEECH = SpeechConfig(max_rows=2, max_frames=FRAMES, max_prompt_tokens=16, first_chunk_frames=3, chunk_frames=4)


@pytest.fixture(scope="module")
def model() -> TalkerModel:
    return tiny_talker()


@pytest.fixture(params=["reference", "fast", "ahead"], ids=["reference-step", "fast-deferred-step", "frames-ahead"])
def engine(model: TalkerModel, request: pytest.FixtureRequest) -> Iterator[EngineLoop]:
    """The runner paths: the reference loop; the fast frame (its graph buffers run eagerly on CPU) whose codes the
    engine reads one iteration later; and the fast frame launched before the last one's codes are read."""
    fast = request.param != "reference"
    runner = TalkerRunner(model, SPEECH.max_rows, 16 + 10 + FRAMES, fast=fast, defer=fast,
                          ahead=request.param == "ahead")
    speech = dataclasses.replace(SPEECH, frames_ahead=request.param == "ahead",
                                 decodes_in_flight=3 if request.param == "ahead" else 1)
    eng = EngineLoop(SpeechCore(runner, speech, EOS), Metrics("talker", "t"))
    yield eng
    eng.close()


KEYS = iter(range(1 << 30))


def _submit(engine: EngineLoop, inp: SpeakInput) -> RequestStream:
    return engine.submit(next(KEYS), inp, inp.request_id)


def _text(stream: RequestStream, token_ids: list[int], end: bool = False) -> None:
    stream.send(MoreText(stream.key, token_ids))
    if end:
        stream.send(TextEnd(stream.key))


def _input(voice: str = "ethan", sampling: TalkerSampling = GREEDY, prompt: list[int] = PROMPT) -> SpeakInput:
    return SpeakInput("r", SpeechPrompt(prompt, voice), sampling, FRAMES, return_codes=True)


async def _drain(handle: RequestStream) -> tuple[list[AudioOut], FinishedOut]:
    chunks = []
    while isinstance(out := await asyncio.wait_for(handle.next(), 30), AudioOut):
        chunks.append(out)
    return chunks, out


def _codes(chunks: list[AudioOut]) -> torch.Tensor:
    return torch.cat([c.codes for c in chunks]).T  # [frames, G] -> (G, T)


def test_a_runner_that_steps_ahead_must_be_fast_and_deferred(model: TalkerModel) -> None:
    for kw in ({"fast": False, "defer": True}, {"fast": True, "defer": False}, {"fast": True, "defer": True,
                                                                                "record_margins": True}):
        with pytest.raises(ValueError, match="ahead=True .* needs fast=True, defer=True and record_margins=False"):
            TalkerRunner(model, 1, 40, ahead=True, **kw)


def test_one_request_is_lockstep_generate_in_chunks(engine: EngineLoop, model: TalkerModel) -> None:
    tokens = list(range(20, 30))

    async def run() -> tuple[list[AudioOut], FinishedOut]:
        handle = _submit(engine, _input())
        _text(handle, tokens[:2])
        _text(handle, tokens[2:], end=True)
        return await _drain(handle)

    chunks, done = asyncio.run(run())
    (ref,) = lockstep_generate(model, [SpeechPrompt(PROMPT, "ethan")], [iter(tokens)], max_frames=FRAMES,
                               thinker_eos=EOS)
    assert torch.equal(_codes(chunks), ref.codes)
    assert [c.num_frames for c in chunks] == [3, 4, 4, 1] and [c.index for c in chunks] == [0, 1, 2, 3]
    assert done.reason is SpeechFinish.LENGTH and done.num_frames == FRAMES
    with torch.no_grad():
        full = model.code2wav(ref.codes[None])[0, 0]
    wav = torch.cat([c.samples for c in chunks])
    # these random weights drive the unclamped waveform to ~1e2 (fp32 rounding shows at 1e-3); the demo
    # checkpoint's stage test checks the PCM tightly
    assert wav.shape == full.shape and (wav - full).abs().max() < 1e-2
    assert done.audio_seconds == pytest.approx(full.numel() / 24000)
    assert engine.core.runner.kv.free_slots and len(engine.core.runner.kv.free_slots) == SPEECH.max_rows


def test_seeded_rows_batched_equal_alone(engine: EngineLoop, model: TalkerModel) -> None:
    texts = [list(range(40, 52)), [60, 61, T.IM_END]]
    samplings = [TalkerSampling(seed=1), TalkerSampling(seed=2, temperature=0.7)]
    voices = ["chelsie", "aiden"]

    async def run() -> list[tuple[list[AudioOut], FinishedOut]]:
        handles = [_submit(engine, _input(v, s)) for v, s in zip(voices, samplings)]
        for h, t in zip(handles, texts):
            _text(h, t, end=True)
        return await asyncio.gather(*(_drain(h) for h in handles))

    results = asyncio.run(run())
    for (chunks, _), v, s, t in zip(results, voices, samplings, texts):
        (alone,) = lockstep_generate(model, [SpeechPrompt(PROMPT, v)], [iter(t)], [s], max_frames=FRAMES,
                                     thinker_eos=EOS)
        assert torch.equal(_codes(chunks), alone.codes)


def test_rows_that_end_on_the_codec_eos_give_the_reference_frames(model: TalkerModel) -> None:
    """The codec EOS made likely (its head row scaled up), so rows end on it at different frames; with frames
    launched ahead, a row's frame launched beside the one that chose the EOS is dropped, its count with it."""
    eos_model = copy.deepcopy(model)
    with torch.no_grad():
        eos_model.lm.codec_head.weight[eos_model.cfg.tokens.codec_eos] *= 3
    texts = [list(range(20 + 5 * i, 26 + 5 * i)) for i in range(4)]
    voices = ["ethan", "chelsie", "aiden", "ethan"]
    refs = [lockstep_generate(eos_model, [SpeechPrompt(PROMPT, v)], [iter(t)], max_frames=FRAMES, thinker_eos=EOS)[0]
            for v, t in zip(voices, texts)]
    assert any(r.codes.shape[1] < FRAMES for r in refs), "the test needs rows that end on the EOS"
    speech = dataclasses.replace(SPEECH, max_rows=4, frames_ahead=True)
    runner = TalkerRunner(eos_model, speech.max_rows, 16 + 10 + FRAMES, fast=True, defer=True, ahead=True)
    engine = EngineLoop(SpeechCore(runner, speech, EOS), Metrics("talker", "t"))
    try:
        async def run() -> list[tuple[list[AudioOut], FinishedOut]]:
            handles = [_submit(engine, _input(v)) for v in voices]
            for h, t in zip(handles, texts):
                _text(h, t, end=True)
            return await asyncio.gather(*(_drain(h) for h in handles))

        for (chunks, done), ref in zip(asyncio.run(run()), refs):
            assert torch.equal(_codes(chunks), ref.codes)
            assert done.num_frames == ref.codes.shape[1]
            assert done.reason is (SpeechFinish.LENGTH if done.num_frames == FRAMES else SpeechFinish.STOP)
        assert len(runner.kv.free_slots) == speech.max_rows and not runner.has_pending
    finally:
        engine.close()


def test_cancel_frees_the_row_and_the_queue_moves(engine: EngineLoop) -> None:
    async def run() -> FinishedOut:
        first, second, third = (_submit(engine, _input()) for _ in range(3))
        for h in (first, second, third):
            _text(h, [20, 21, 22, 23, 24])  # no end: rows wait for text after 4 frames
        await asyncio.wait_for(first.next(), 30)
        await asyncio.wait_for(second.next(), 30)
        first.close()  # the third request gets its row
        third.send(TextEnd(third.key))
        _, done = await _drain(third)
        second.close()
        return done

    done = asyncio.run(run())
    assert done.num_frames > 0 and done.queue_seconds > 0
    asyncio.run(asyncio.sleep(0.2))
    assert len(engine.core.runner.kv.free_slots) == SPEECH.max_rows


def test_a_prompt_the_prefill_refuses_fails_only_its_request(engine: EngineLoop) -> None:
    async def run() -> tuple[BaseException, FinishedOut]:
        bad, good = _submit(engine, _input(prompt=PROMPT[:-3])), _submit(engine, _input())
        for h in (bad, good):
            _text(h, [20], end=True)
        with pytest.raises(InvalidArgument) as caught:
            await asyncio.wait_for(bad.next(), 30)
        _, done = await _drain(good)
        return caught.value, done

    err, done = asyncio.run(run())
    assert "assistant" in err.message and done.num_frames > 0


def test_a_dead_engine_fails_every_stream(engine: EngineLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(states: object, defer: bool = False, ahead: bool = False) -> torch.Tensor:
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine.core.runner, "step", broken)

    async def run() -> None:
        handle = _submit(engine, _input())
        _text(handle, [20, 21])
        with pytest.raises(Unavailable, match="device lost"):
            await asyncio.wait_for(handle.next(), 30)
        with pytest.raises(Unavailable, match="has failed"):
            await asyncio.wait_for(_submit(engine, _input()).next(), 30)

    asyncio.run(run())
    assert engine.failure is not None


def test_first_audio_timeline_is_logged_at_debug(engine: EngineLoop, caplog: pytest.LogCaptureFixture) -> None:
    """Where a request's time to first audio went, once per request: the 3 a.m. answer to "why is TTFA high"."""

    async def run() -> None:
        handle = _submit(engine, _input())
        _text(handle, [20, 21, 22, 23], end=True)
        await _drain(handle)

    with caplog.at_level("DEBUG", logger="services.talker.speech_core"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if "first audio" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("speech r: first thinker token +") and "prefill" in lines[0]
    assert "after 3 frames" in lines[0]  # the first chunk holds first_chunk_frames


def test_a_failed_warm_up_fails_the_engine_at_start(model: TalkerModel) -> None:
    class BrokenRunner(TalkerRunner):
        def warm_up(self) -> None:
            raise RuntimeError("no device")

    with pytest.raises(RuntimeError, match="warm-up") as caught:
        EngineLoop(SpeechCore(BrokenRunner(model, 1, 40), SPEECH, EOS))
    assert "no device" in str(caught.value.__cause__)


def test_an_iteration_hands_its_outputs_to_the_loop_in_one_call(engine: EngineLoop) -> None:
    """The last chunk and the finish come out of the same iteration: one wake-up of the loop carries both."""

    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        calls = 0
        plain = loop.call_soon_threadsafe

        def counted(callback, *args):  # noqa: ANN001, ANN202
            nonlocal calls
            calls += 1
            return plain(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        handle = _submit(engine, _input())
        _text(handle, [20, 21, 22], end=True)
        chunks, _ = await _drain(handle)
        return calls, len(chunks) + 1

    calls, outputs = asyncio.run(run())
    assert 0 < calls < outputs


def test_a_stream_whose_loop_is_gone_is_dropped_and_frees_its_row(engine: EngineLoop,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    async def submit() -> RequestStream:
        return _submit(engine, _input())

    handle = asyncio.run(submit())  # its loop is closed before the request can produce anything
    with caplog.at_level("WARNING", logger="runtime.engine.engine_loop"):
        _text(handle, [20, 21, 22], end=True)
        deadline = time.monotonic() + 30
        while not _dropped(caplog) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert _dropped(caplog)
    while len(engine.core.runner.kv.free_slots) < SPEECH.max_rows and time.monotonic() < deadline:
        time.sleep(0.01)  # the drop frees the row within the iteration that logged it
    assert len(engine.core.runner.kv.free_slots) == SPEECH.max_rows and engine.failure is None


def _dropped(caplog: pytest.LogCaptureFixture) -> bool:
    return any("can no longer be reached" in r.getMessage() for r in caplog.records)


def test_the_core_takes_only_its_commands_and_ignores_unknown_keys(model: TalkerModel) -> None:
    core = SpeechCore(TalkerRunner(model, 1, 40), SPEECH, EOS)
    with pytest.raises(TypeError, match="Add, Abort, MoreText and TextEnd"):
        core.apply("more text")
    core.apply(MoreText(99, [20]))  # a request it does not hold (finished, cancelled): ignored
    assert core.load() == CoreLoad(0, 0, None, None) and not core.has_work


def test_the_talker_steps_reach_the_shared_engine_metrics(model: TalkerModel) -> None:
    metrics = Metrics("talker", "t")
    engine = EngineLoop(SpeechCore(TalkerRunner(model, 1, 16 + 10 + FRAMES), SPEECH, EOS), metrics)
    try:
        async def run() -> None:
            stream = _submit(engine, _input())
            _text(stream, [20, 21], end=True)
            await _drain(stream)

        asyncio.run(run())
    finally:
        engine.close()
    labels = {"stage": "talker", "replica": "t", "model_name": ""}
    value = lambda name: metrics.registry.get_sample_value(name, labels)  # noqa: E731
    assert value("omnimesh_batch_size_count") == FRAMES and value("omnimesh_batch_size_sum") == FRAMES  # 1 row
    assert value("omnimesh_step_time_seconds_count") >= FRAMES and value("omnimesh_requests_running") == 0
