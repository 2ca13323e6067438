"""A stage that refuses a client stream while its client is still writing: the client reads the stage's status (not
grpc's INTERNAL "Internal error from Core"), however long the writing takes, and the drain before the refusal is
bounded for a client that stops writing or never stops.

Issue 18: a gateway relaying a 145 MB video to a vision stage that refused it (RESOURCE_EXHAUSTED) on its `start`
message kept writing frames for longer than the stage's fixed 1 s drain; the stage's status then met a write in
flight and the gateway got INTERNAL. The clients here write from an event loop that is busy between messages (a
blocking pause, as the gateway's loop is while it serves 16 streams), over a real grpc.aio server on loopback.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

import runtime.interceptor as interceptor
from omnimesh.v1 import vision_pb2, vision_pb2_grpc
from runtime.errors import InvalidArgument, ResourceExhausted, Unavailable
from runtime.interceptor import ErrorMappingInterceptor
from runtime.metrics import Metrics
from tests.integration.vision.vision_calls import frame_msgs, frames, start_msg


class Refusing(vision_pb2_grpc.VisionServicer):
    """Refuses on the `start` message (load) or on the first frames chunk (bad input), as the vision stage does."""

    def __init__(self, at_frames: bool = False) -> None:
        self.at_frames = at_frames

    async def Encode(self, request_iterator: AsyncIterator[vision_pb2.VisionRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[vision_pb2.VisionResponse]:
        await anext(request_iterator)
        if not self.at_frames:
            raise ResourceExhausted("the vision stage is full; retry shortly", retry_after_s=2.0)
        await anext(request_iterator)
        raise InvalidArgument("frames[item.0]", "has dtype FLOAT32; frames are uint8 RGB")
        yield vision_pb2.VisionResponse()  # an async generator, as the real handler is


class RefusingWithARelay(vision_pb2_grpc.VisionServicer):
    """Leaves a task of its own reading the rest of the stream, then fails, as the talker's Speak does when its
    engine dies while the text relay waits on the next message."""

    def __init__(self) -> None:
        self.relayed = 0

    async def _relay(self, request_iterator: AsyncIterator[vision_pb2.VisionRequest]) -> None:
        async for _ in request_iterator:
            self.relayed += 1

    async def Encode(self, request_iterator: AsyncIterator[vision_pb2.VisionRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[vision_pb2.VisionResponse]:
        await anext(request_iterator)
        relay = asyncio.create_task(self._relay(request_iterator))
        await asyncio.sleep(0.1)  # the relay is inside the stream's anext() now
        relay.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise Unavailable("the vision engine has failed", stage="vision")
        yield vision_pb2.VisionResponse()


async def _serve(servicer: vision_pb2_grpc.VisionServicer) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=[ErrorMappingInterceptor(Metrics("vision", "r0"))],
                             options=[("grpc.so_reuseport", 0)])
    vision_pb2_grpc.add_VisionServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


CHUNK = 256 << 10


def _busy_writer(num_chunks: int, busy_s: float, keep_open_s: float = 0.0) -> AsyncIterator[vision_pb2.VisionRequest]:
    """`start`, then `num_chunks` frames chunks, the loop blocked `busy_s` before each (work of other requests);
    then, if `keep_open_s`, an open stream that sends nothing more for that long."""
    msgs = frame_msgs("item.0", frames(num_chunks, 16, CHUNK // 48), chunk_bytes=CHUNK)

    async def gen() -> AsyncIterator[vision_pb2.VisionRequest]:
        yield start_msg((True, [num_chunks // 2, 2, 2]))
        for m in msgs:
            time.sleep(busy_s)  # noqa: ASYNC251 - the point: the writer's loop is busy, as a loaded gateway's is
            yield m
        if keep_open_s:
            await asyncio.sleep(keep_open_s)

    return gen()


async def _call(addr: str, requests: AsyncIterator[vision_pb2.VisionRequest]) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(addr) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in vision_pb2_grpc.VisionStub(channel).Encode(requests, timeout=30):
                pass
        return err.value


def _run(servicer: vision_pb2_grpc.VisionServicer, requests: AsyncIterator[vision_pb2.VisionRequest]
         ) -> tuple[grpc.aio.AioRpcError, float]:  # fmt: skip
    async def run() -> tuple[grpc.aio.AioRpcError, float]:
        server, addr = await _serve(servicer)
        try:
            t0 = time.monotonic()
            err = await asyncio.wait_for(_call(addr, requests), 40)
            return err, time.monotonic() - t0
        finally:
            await server.stop(None)

    return asyncio.run(run())


def test_a_load_refusal_reaches_a_client_that_writes_for_longer_than_the_idle_drain() -> None:
    # 64 chunks, 40 ms apart: ~2.6 s of writing, over twice REFUSED_STREAM_DRAIN_S
    err, _ = _run(Refusing(), _busy_writer(64, 0.04))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (err.code(), err.details())
    assert err.details() == "the vision stage is full; retry shortly"
    retry = [d for d in rpc_status.from_call(err).details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
    assert len(retry) == 1


def test_a_bad_chunk_refusal_names_the_field_for_a_client_still_writing() -> None:
    err, _ = _run(Refusing(at_frames=True), _busy_writer(64, 0.04))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    assert err.details().startswith("frames[item.0]: has dtype FLOAT32")


def test_a_refused_client_that_stops_writing_without_half_closing_gets_the_refusal_after_the_idle_drain() -> None:
    err, seconds = _run(Refusing(), _busy_writer(2, 0.0, keep_open_s=20))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert interceptor.REFUSED_STREAM_DRAIN_S * 0.9 <= seconds < interceptor.REFUSED_STREAM_DRAIN_S + 3


def test_the_drain_of_a_client_that_never_stops_writing_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interceptor, "REFUSED_STREAM_DRAIN_MAX_S", 1.5)

    async def endless() -> AsyncIterator[vision_pb2.VisionRequest]:
        yield start_msg((True, [1000, 2, 2]))
        while True:  # chunks 50 ms apart, each within the idle drain: only the overall bound ends it
            for m in frame_msgs("item.0", frames(2, 16, CHUNK // 48), chunk_bytes=CHUNK):
                await asyncio.sleep(0.05)
                yield m

    err, seconds = _run(Refusing(), endless())
    # the call ends (its status is the refusal, or grpc's INTERNAL when a write meets it: this client never stops)
    assert err.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL)
    assert 1.4 <= seconds < 1.5 + 3


@pytest.mark.parametrize("keep_open_s", [0.0, 20.0])
def test_a_refusal_while_the_handlers_own_task_reads_the_stream_keeps_its_status(keep_open_s: float) -> None:
    """A second reader of a request stream meets 'anext(): asynchronous generator is already running'; the call
    ends with the handler's UNAVAILABLE, not UNKNOWN: at once when the client half-closes (the relay reads to the
    end), after the idle drain when it keeps the stream open."""
    servicer = RefusingWithARelay()
    err, seconds = _run(servicer, _busy_writer(4, 0.03, keep_open_s=keep_open_s))
    assert err.code() == grpc.StatusCode.UNAVAILABLE, (err.code(), err.details())
    assert err.details() == "the vision engine has failed"
    assert seconds < interceptor.REFUSED_STREAM_DRAIN_S + 3
