"""The vision stage admits a request on its `start` message against the work it already holds: past
`max_pending_size` patches (and `max_waiting` requests waiting, here none) a new request is RESOURCE_EXHAUSTED with
a RetryInfo before any of its frames is read;
the held work is released when a request ends (finished or cancelled), and a lone request is always admitted."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omnimesh.v1 import vision_pb2, vision_pb2_grpc
from tests.integration.mesh_process import Proc, start_stage
from tests.integration.vision.vision_calls import encode_raw, frame_msgs, frames, start_msg

LIMIT = 1024  # patches: the request limit too, so one large request fills the stage
BIG = (False, [1, 16, 48])  # 768 patches: 256 x 768 pixels
SMALL = (False, [1, 16, 32])  # 512 patches: 768 + 512 > 1024


@pytest.fixture(scope="module")
def small_stage(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    # no queue: a request past the limit is refused at once (the queue: tests/unit/vision/test_vision_admission.py)
    mesh = {"vision": {"encoder": {"max_batch_size": LIMIT, "max_request_size": LIMIT, "max_pending_size": LIMIT,
                                   "batch_wait_ms": 1.0, "max_waiting": 0}}}
    proc = start_stage("vision", demo_ckpt, mesh, tmp_path_factory.mktemp("vision-small"))
    yield proc
    assert proc.stop() == 0


def _request(item: tuple[bool, list[int]]) -> list[vision_pb2.VisionRequest]:
    _, (_, h, w) = item
    return [start_msg(item), *frame_msgs("item.0", frames(1, h * 16, w * 16))]


async def _encode_paced(addr: str, msgs: list[vision_pb2.VisionRequest]) -> list[vision_pb2.VisionResponse]:
    """Like `encode_raw`, but stops writing once the call has ended: grpc.aio turns a write that races the server's
    status into a client-side INTERNAL, and this test must see the server's status."""
    async with grpc.aio.insecure_channel(addr) as channel:
        call = None

        async def paced() -> AsyncIterator[vision_pb2.VisionRequest]:
            for i, m in enumerate(msgs):
                if i:
                    await asyncio.sleep(0.05)  # the refusal answers the start message
                if call is not None and call.done():
                    return
                yield m

        call = vision_pb2_grpc.VisionStub(channel).Encode(paced())
        return [r async for r in call]


async def _refused_while_big_is_open(addr: str) -> grpc.aio.AioRpcError:
    """Opens BIG (start only: the stage holds its patches while it waits for the frames), then sends SMALL until the
    stage refuses it (BIG's start may reach the server after the first tries); then ends BIG properly."""
    async with grpc.aio.insecure_channel(addr) as channel:
        big = vision_pb2_grpc.VisionStub(channel).Encode()
        big_messages = _request(BIG)
        await big.write(big_messages[0])
        refused = None
        for _ in range(25):
            try:
                await _encode_paced(addr, _request(SMALL))
            except grpc.aio.AioRpcError as err:
                refused = err
                break
            await asyncio.sleep(0.2)
        for msg in big_messages[1:]:
            await big.write(msg)
        await big.done_writing()
        replies = [r async for r in big]
        assert replies[-1].WhichOneof("msg") == "finished"
        assert refused is not None, "the stage never refused the request over its pending limit"
        return refused


def test_a_request_past_the_pending_limit_is_resource_exhausted(small_stage: Proc) -> None:
    addr = f"127.0.0.1:{small_stage.ports['grpc_port']}"
    err = asyncio.run(_refused_while_big_is_open(addr))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "holds 768 patches" in err.details() and "brings 512" in err.details()
    assert "vision.encoder.max_pending_size=1024" in err.details()
    status = rpc_status.from_call(err)
    assert any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status.details)
    # BIG finished: its patches were released, and SMALL now runs; so does BIG, alone
    assert asyncio.run(encode_raw(addr, _request(SMALL)))[-1].WhichOneof("msg") == "finished"
    assert asyncio.run(encode_raw(addr, _request(BIG)))[-1].WhichOneof("msg") == "finished"


def test_a_cancelled_request_releases_what_it_held(small_stage: Proc) -> None:
    addr = f"127.0.0.1:{small_stage.ports['grpc_port']}"

    async def cancel_then_send() -> str:
        async with grpc.aio.insecure_channel(addr) as channel:
            big = vision_pb2_grpc.VisionStub(channel).Encode()
            await big.write(_request(BIG)[0])
            await asyncio.sleep(0.5)  # the stage admitted it and waits for its frames
            big.cancel()
        for _ in range(25):  # the server sees the cancel shortly after
            try:
                return (await _encode_paced(addr, _request(SMALL)))[-1].WhichOneof("msg")
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                await asyncio.sleep(0.2)
        return "still refused"

    assert asyncio.run(cancel_then_send()) == "finished"
