"""A client that cancels mid-stream (uploading, queued, or reading replies) leaves the vision stage healthy."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import grpc

from omnimesh.v1 import vision_pb2, vision_pb2_grpc
from tests.integration.mesh_process import Proc, metric_value, scrape
from tests.integration.vision.vision_calls import SERVING, encode_raw, frame_msgs, frames, health, start_msg

IMAGE = (False, [1, 2, 2])


def metric(port: int, name: str, **labels: str) -> float:
    try:
        return metric_value(scrape(port), name, **labels)
    except KeyError:  # a labelled series appears on first use
        return 0.0


def finished_calls(port: int) -> float:
    """Encode calls the server has closed, by any code: a cancel mid-upload reads as an early end of the
    request stream first, so the server may record it as INVALID_ARGUMENT before the cancel lands."""
    return metric(port, "omnimesh_grpc_server_handled_total", grpc_method="Encode")


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def assert_healthy(addr: str, port: int) -> None:
    assert await health(addr) == SERVING
    replies = await encode_raw(addr, [start_msg(IMAGE), *frame_msgs("item.0", frames(1, 32, 32))])
    assert replies[-1].WhichOneof("msg") == "finished"
    assert metric(port, "omnimesh_queue_depth") == 0


async def cancel_after(addr: str, messages: list[vision_pb2.VisionRequest], hold: asyncio.Event | None,
                       replies_before_cancel: int, delay: float) -> None:
    """Sends `messages` (then blocks on `hold` if given, else half-closes), reads some replies, then cancels."""
    async def requests() -> AsyncIterator[vision_pb2.VisionRequest]:
        for m in messages:
            yield m
        if hold is not None:
            await hold.wait()

    async with grpc.aio.insecure_channel(addr) as channel:
        call = vision_pb2_grpc.VisionStub(channel).Encode(requests())
        for _ in range(replies_before_cancel):
            await call.read()
        await asyncio.sleep(delay)
        call.cancel()


def test_cancel_while_uploading_frames(vision_stage: Proc, vision_addr: str) -> None:
    port = vision_stage.ports["metrics_port"]
    before = finished_calls(port)
    partial = [start_msg(IMAGE), *frame_msgs("item.0", frames(1, 32, 32), chunk_bytes=1000)[:1]]

    async def scenario() -> None:
        await cancel_after(vision_addr, partial, asyncio.Event(), 0, delay=0.2)
        assert await wait_until(lambda: finished_calls(port) > before)  # the server let go of the call
        await assert_healthy(vision_addr, port)

    asyncio.run(scenario())


def test_cancel_while_queued_runs_no_forward(vision_stage: Proc, vision_addr: str) -> None:
    port = vision_stage.ports["metrics_port"]
    batches = metric(port, "omnimesh_encoder_items_per_batch_count")
    whole = [start_msg(IMAGE), *frame_msgs("item.0", frames(1, 32, 32))]

    async def scenario() -> None:
        await cancel_after(vision_addr, whole, None, 0, delay=0.1)  # inside the stage's 250 ms batch window
        await asyncio.sleep(0.5)
        assert metric(port, "omnimesh_encoder_items_per_batch_count") == batches  # the item was dropped
        await assert_healthy(vision_addr, port)

    asyncio.run(scenario())


def test_cancel_while_reading_replies(vision_stage: Proc, vision_addr: str) -> None:
    port = vision_stage.ports["metrics_port"]
    two = [start_msg(IMAGE, IMAGE), *frame_msgs("item.0", frames(1, 32, 32)), *frame_msgs("item.1", frames(1, 32, 32))]

    async def scenario() -> None:
        await cancel_after(vision_addr, two, None, 1, delay=0.0)
        await assert_healthy(vision_addr, port)

    asyncio.run(scenario())
