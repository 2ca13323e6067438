"""A client that cancels an Encode, mid-upload or while its clip waits for a forward, leaves the stage healthy."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import audio_pb2, audio_pb2_grpc
from tests.integration.audio.audio_calls import clip, embeddings, encode, metric, request, samples, start
from tests.integration.mesh_process import Proc

QUEUE_SHOW_S = 30.0  # from the send to the clip in the queue: receive, decode, resample, on CI's two busy cores


async def _cancel_after(addr: str, msgs: list[audio_pb2.AudioRequest], hold_open: bool,
                        ready: Callable[[], Awaitable[None]]) -> None:
    """Sends `msgs` (then keeps the stream open if `hold_open`), cancels once the last went out and `ready` returns."""
    sent = asyncio.Event()

    async def it() -> AsyncIterator[audio_pb2.AudioRequest]:
        for m in msgs:
            yield m
        sent.set()
        if hold_open:
            await asyncio.Event().wait()

    async with grpc.aio.insecure_channel(addr) as channel:
        call = audio_pb2_grpc.AudioStub(channel).Encode(it())
        reader = asyncio.ensure_future(call.read())
        await sent.wait()
        await ready()
        call.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        assert call.cancelled() or (await call.code()) == grpc.StatusCode.CANCELLED


def _assert_healthy(stage: Proc, addr: str) -> None:
    async def check() -> health_pb2.HealthCheckResponse:
        async with grpc.aio.insecure_channel(addr) as channel:
            return await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())

    assert asyncio.run(check()).status == health_pb2.HealthCheckResponse.SERVING
    out = embeddings(asyncio.run(encode(addr, request([clip(0.5, seed=30)]))))
    assert out["clip.0.embeddings"].shape == (7, 64)
    assert metric(stage.ports["metrics_port"], "omnimesh_queue_depth") == 0
    assert stage.proc.poll() is None


def test_cancel_mid_upload(audio_stage: Proc, audio_addr: str) -> None:
    half = samples("clip.0", clip(1.0), chunk_bytes=32 << 10)[:1]  # the first of two chunks
    asyncio.run(_cancel_after(audio_addr, [start(16000), *half], hold_open=True, ready=lambda: asyncio.sleep(0.1)))
    _assert_healthy(audio_stage, audio_addr)


def test_cancel_while_queued_for_a_forward(audio_stage: Proc, audio_addr: str) -> None:
    port = audio_stage.ports["metrics_port"]
    items0 = metric(port, "omnimesh_encoder_items_per_batch_sum")

    async def queued() -> None:
        """Returns while the clip waits its BATCH_WAIT_MS for companions, before its forward starts. How soon after
        the send the stage queues it has no bound on a loaded machine; once queued, it stays BATCH_WAIT_MS."""
        deadline = time.monotonic() + QUEUE_SHOW_S
        while metric(port, "omnimesh_queue_depth") < 1:
            assert time.monotonic() < deadline, "the clip never showed in the queue"
            await asyncio.sleep(0.002)

    asyncio.run(_cancel_after(audio_addr, request([clip(2.0, seed=31)]), hold_open=False, ready=queued))
    cancelled = metric(port, "omnimesh_grpc_server_handled_total", grpc_method="Encode", grpc_code="CANCELLED")
    assert cancelled >= 1
    _assert_healthy(audio_stage, audio_addr)
    assert metric(port, "omnimesh_encoder_items_per_batch_sum") - items0 == 1, "the cancelled clip was still encoded"


def test_cancel_after_the_first_response(audio_stage: Proc, audio_addr: str) -> None:
    async def run() -> None:
        async with grpc.aio.insecure_channel(audio_addr) as channel:
            call = audio_pb2_grpc.AudioStub(channel).Encode(
                _iterate(request([clip(0.5, seed=32), clip(3.0, seed=33)])))
            first = await call.read()
            assert first.WhichOneof("msg") == "embeddings"
            call.cancel()

    asyncio.run(run())
    _assert_healthy(audio_stage, audio_addr)


async def _iterate(msgs: list[audio_pb2.AudioRequest]) -> AsyncIterator[audio_pb2.AudioRequest]:
    for m in msgs:
        yield m
