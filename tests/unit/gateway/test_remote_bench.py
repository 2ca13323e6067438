"""`omnimesh bench --addr`'s parts without a mesh: what a level reports from known records, the closed loop's
counts, the gRPC driver's refusals and failures, a failing level keeping the levels before it, the workloads' inputs, and the missing-openai exit."""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
from pathlib import Path

import grpc
import pytest
import soundfile as sf
from PIL import Image as PILImage

from omnimesh import AudioDelta, AudioFailed, ResourceExhausted, TextDelta, Unimplemented
from gateway.cli.remote_bench import run as run_module
from gateway.cli.remote_bench.drivers import GrpcDriver, Refused
from gateway.cli.remote_bench.load import Record, closed_loop, summarize
from gateway.cli.remote_bench.workloads import WORKLOADS, audio_request, image_request, moving_mp4, video_request


def record(index: int, start: float, texts: list[tuple[float, float]], end: float, audio: float = 0.0) -> Record:
    rec = Record(index, start, True, list(texts), end=end)
    if audio:
        rec.audio(start + 0.5, audio)
    return rec


def test_a_level_reports_window_throughput_ttft_and_itl() -> None:
    # two measured requests in [0, 2]: 4 + 4 tokens; ITL of the second: one event of 2 tokens after 0.4 s
    recs = [record(0, 0.0, [(0.1, 1), (0.2, 1), (0.3, 1), (0.4, 1)], 1.0),
            record(1, 1.0, [(1.2, 2), (1.6, 2)], 2.0, audio=3.0)]
    level = summarize(recs, concurrency=1)
    assert level["requests"] == 2 and level["window_s"] == 2.0 and level["output_tok_s"] == 4.0
    assert level["ttft_ms_p50"] == pytest.approx(150.0) and level["itl_ms_p50"] == pytest.approx(100.0)
    assert level["itl_ms_p99"] == pytest.approx(200.0, rel=0.05)  # the 0.4 s gap split over its 2 tokens
    assert level["audio_s_per_s"] == 1.5 and level["ttfa_ms_p50"] == pytest.approx(500.0)
    assert level["rtf_p50"] == pytest.approx(1 / 3)


def test_usage_spread_over_chunks_when_the_api_does_not_count_them() -> None:
    rec = Record(0, 0.0, True, [(0.1, 0.0), (0.2, 0.0), (0.4, 0.0), (0.5, 0.0)])
    rec.spread(8)
    assert rec.tokens == 8 and rec.itl() == pytest.approx([0.05] * 2 + [0.1] * 2 + [0.05] * 2)


def test_closed_loop_warms_up_measures_and_cancels_the_extras() -> None:
    started: list[int] = []

    async def one(index: int, rec: Record) -> None:
        started.append(index)
        rec.text(rec.start, 1)
        await asyncio.sleep(0.001 * (1 + index % 3))

    records = asyncio.run(closed_loop(one, concurrency=3, measured=5, first_index=10))
    assert [r.index for r in records if r.measured] == [13, 14, 15, 16, 17]  # after 3 warm-up requests
    assert all(r.end is not None for r in records if r.measured) and started[:3] == [10, 11, 12]


def test_a_failed_request_fails_the_level() -> None:
    async def one(index: int, rec: Record) -> None:
        raise RuntimeError(f"request {index}: broken")

    with pytest.raises(RuntimeError, match="request 0: broken"):
        asyncio.run(closed_loop(one, concurrency=2, measured=2, first_index=0))


class FakeClient:
    def __init__(self, events: list | Exception) -> None:
        self.events = events

    async def chat_stream(self, *args: object, **kwargs: object):
        if isinstance(self.events, Exception):
            raise self.events
        for event in self.events:
            yield event


def grpc_driver(events: list | Exception) -> GrpcDriver:
    return GrpcDriver([FakeClient(events)], 4)


def test_grpc_driver_times_text_and_audio() -> None:
    rec = Record(0, 0.0, True)
    events = [TextDelta("a", (1, 2)), AudioDelta(b"\0\0" * 2400, 24_000, 0), TextDelta("b", (3,))]
    asyncio.run(grpc_driver(events).send(WORKLOADS["speech"](0), rec))
    assert rec.tokens == 3 and rec.audio_s == pytest.approx(0.1) and rec.first_audio is not None


def test_grpc_driver_refusal_skips_and_failed_speech_fails() -> None:
    refused = Unimplemented(grpc.StatusCode.UNIMPLEMENTED, "image input is not served")
    with pytest.raises(Refused, match="image input"):
        asyncio.run(grpc_driver(refused).send(image_request(0), Record(0, 0.0, True)))
    with pytest.raises(RuntimeError, match="the speech failed: UNAVAILABLE"):
        asyncio.run(grpc_driver([AudioFailed("UNAVAILABLE", "talker down", "talker")]).send(
            WORKLOADS["speech"](0), Record(0, 0.0, True)))


class FailsAfter(FakeClient):
    """Answers its first `answered` requests, then refuses every one as a loaded gateway does."""

    def __init__(self, answered: int) -> None:
        super().__init__([TextDelta("a", (1,))])
        self.answered = answered

    async def chat_stream(self, *args: object, **kwargs: object):
        self.answered -= 1
        if self.answered < 0:
            self.events = ResourceExhausted(grpc.StatusCode.RESOURCE_EXHAUSTED, "over gateway.max_media_bytes")
        async for event in super().chat_stream():
            yield event


def test_a_failing_level_keeps_the_levels_measured_before_it() -> None:
    driver = GrpcDriver([FailsAfter(answered=3)], 4)  # the c=1 level (warm-up, two measured) answers; c=2 is refused
    args = argparse.Namespace(concurrency=[1, 2], min_measured=2, measured_per_stream=1)
    levels: list[dict] = []
    with pytest.raises(ResourceExhausted, match="max_media_bytes"):
        asyncio.run(run_module.run_workload(args, driver, "text", levels))
    assert [lv["concurrency"] for lv in levels] == [1] and levels[0]["requests"] == 2


def test_media_inputs_are_distinct_and_decode() -> None:
    a, b = image_request(0).media.data, image_request(1).media.data
    assert a != b and PILImage.open(io.BytesIO(a)).size == (640, 480)
    samples, rate = sf.read(io.BytesIO(audio_request(0).media.data))
    assert rate == 16_000 and len(samples) == 80_000 and 0.05 < abs(samples).mean() < 0.5


def test_video_inputs_are_distinct_minute_clips_made_ahead_on_every_core() -> None:
    import av

    short = moving_mp4(0, seconds=3)  # the same maker as the workload's 60 s clip, shorter to keep the test quick
    with av.open(io.BytesIO(short)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 6 and frames[0].shape == (448, 448, 3)
    assert not (frames[0] == frames[1]).all()  # every frame new pixels
    assert moving_mp4(1, seconds=3) != short and moving_mp4(0, seconds=3) == short  # distinct per index, repeatable
    request = video_request(0)
    assert request.media.mime_type == "video/mp4" and request.openai_messages()[0]["content"][0]["type"] == "video_url"
    made = run_module.prepare(image_request, range(3, 6))
    assert list(made) == [3, 4, 5] and made[4].media.data == image_request(4).media.data


def test_openai_api_without_the_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch, capsys,
                                                             tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openai" else real(name, *a))
    args = argparse.Namespace(api="openai", out=tmp_path / "x.json")
    assert run_module.run(args) == 2 and "pip install openai" in capsys.readouterr().err
