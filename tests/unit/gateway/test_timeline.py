"""Where a call's time went (gateway/timeline.py): the timeline itself, and the servicer on a real grpc.aio server on
loopback sending it as the `omnimesh-timing` trailer of an answered call and logging a slow call with it."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import grpc
import pytest

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from runtime.config import GatewayConfig, ServerConfig
from runtime.errors import Unavailable
from runtime.metrics import Metrics
from runtime.server import StageServer
from gateway.request_decode import SERVICE_NAME, add_omni_servicer
from gateway.service import DoneEvent
from gateway.servicer import OmniServicer
from gateway.timeline import PHASES, Timeline, end_phase, stage_timings
from omnimesh.timing import TIMING_TRAILER, parse_timing


def test_phases_take_the_time_since_the_one_before_and_keep_their_first_end() -> None:
    timeline = Timeline(start=time.monotonic() - 0.010)
    timeline.end_phase("admit")
    time.sleep(0.002)
    timeline.end_phase("encode")
    timeline.end_phase("admit")  # a second window's phases do not move the first ones
    timeline.stage_timings("audio", 0.003, 0.004)
    timeline.stage_timings("audio", 9.0, 9.0)
    phases = timeline.phases()
    assert list(phases) == ["admit", "encode"] and phases["admit"] >= 0.010 and phases["encode"] >= 0.002
    assert timeline.first_token_s() is None
    timeline.end_phase("first_token")
    assert timeline.first_token_s() == pytest.approx(sum(timeline.phases().values()))
    got = parse_timing(timeline.trailer())
    assert list(got) == ["admit", "encode", "first_token", "audio.queue", "audio.compute", "total"]
    assert (got["audio.queue"], got["audio.compute"]) == (3.0, 4.0)
    assert got["total"] >= got["admit"] + got["encode"] + got["first_token"] - 0.02


def test_outside_a_call_the_marks_do_nothing() -> None:
    end_phase("admit")  # a service driven directly (tests, benches) has no timeline: no error, nothing kept
    stage_timings("thinker", 1.0, 2.0)


class PhasedService:
    """Stands in for OmniService: ends the phases as the real one does (the mesh test checks the real one's), then
    answers, or fails after its encoders."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def chat(self, chat, timeout: float | None) -> AsyncIterator[DoneEvent]:
        for phase in PHASES[:4]:
            end_phase(phase)
        stage_timings("audio", 0.001, 0.002)
        if chat.turns[0].parts[0] == "down":
            raise Unavailable("thinker stage is down", stage="thinker")
        end_phase("first_token")
        stage_timings("thinker", 0.003, 0.004)
        yield DoneEvent(common_pb2.FINISH_REASON_STOP)


@asynccontextmanager
async def serving(cfg: GatewayConfig, metrics: Metrics | None = None) -> AsyncIterator[omni_pb2_grpc.OmniStub]:
    metrics = metrics or Metrics("gateway", "t")
    server = StageServer("gateway", "t", ServerConfig(port=0, metrics_port=-1), metrics)
    servicer = OmniServicer(PhasedService(metrics), cfg, omni_pb2.OmniInfo())
    server.add_service(partial(add_omni_servicer, max_request_bytes=1 << 20), servicer, SERVICE_NAME)
    ports = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc_port}") as channel:
            yield omni_pb2_grpc.OmniStub(channel)
    finally:
        await server.stop(0)


async def chat(stub: omni_pb2_grpc.OmniStub, text: str) -> tuple[grpc.StatusCode, dict[str, float] | None]:
    call = stub.Chat(omni_pb2.ChatRequest(messages=[omni_pb2.Message(
        role="user", content=[omni_pb2.ContentPart(text=text)])]), timeout=10)
    try:
        [_ async for _ in call]
    except grpc.aio.AioRpcError as err:
        code = err.code()
    else:
        code = grpc.StatusCode.OK
    trailer = dict(await call.trailing_metadata() or ()).get(TIMING_TRAILER)
    return code, None if trailer is None else parse_timing(trailer)


def test_an_answered_call_carries_its_timing_and_a_failed_one_none() -> None:
    metrics = Metrics("gateway", "t")

    async def run() -> list[tuple[grpc.StatusCode, dict[str, float] | None]]:
        async with serving(GatewayConfig(slow_first_token_s=0.0), metrics) as stub:
            return [await chat(stub, "hi"), await chat(stub, "down")]

    (ok, timing), (failed, none) = asyncio.run(run())
    assert ok == grpc.StatusCode.OK and failed == grpc.StatusCode.UNAVAILABLE and none is None
    assert timing is not None
    assert list(timing) == [*PHASES, "audio.queue", "audio.compute", "thinker.queue", "thinker.compute", "total"]
    assert all(v >= 0 for v in timing.values()) and timing["thinker.compute"] == 4.0
    # the phase histogram counts the answered call only, once per phase
    for phase in PHASES:
        labels = {"stage": "gateway", "replica": "t", "model_name": "", "phase": phase}
        assert metrics.registry.get_sample_value("omnimesh_request_phase_seconds_count", labels) == 1, phase


@pytest.mark.parametrize(("threshold", "logged"), [(0.0, []), (60.0, []),
                                                   (1e-9, ["slow request (OK)", "slow request (UNAVAILABLE)"])])
def test_a_call_slower_than_the_threshold_is_logged_with_its_phases(
        caplog: pytest.LogCaptureFixture, threshold: float, logged: list[str]) -> None:
    async def run() -> None:
        async with serving(GatewayConfig(slow_first_token_s=threshold)) as stub:
            await chat(stub, "hi")
            await chat(stub, "down")

    with caplog.at_level(logging.WARNING, logger="gateway.servicer"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.servicer"]
    assert [line.split(":")[0] for line in lines] == [f"{prefix}" for prefix in logged]
    if logged:
        assert "to its first token; ms by phase: admit;dur=" in lines[0] and "thinker.queue;dur=3.00" in lines[0]
        assert "and no token; ms by phase: admit;dur=" in lines[1] and "audio.compute;dur=2.00" in lines[1]


def test_the_threshold_is_checked() -> None:
    from runtime.config import ConfigError

    with pytest.raises(ConfigError, match="slow_first_token_s"):
        GatewayConfig(slow_first_token_s=-1.0)
