"""The vision stage's admission as the gateway sees it, over a real vision stage (the demo checkpoint's tower, on CPU)
and the gateway's VisionClient on loopback.

Issue 18: 16 concurrent 60 s videos exceeded `vision.encoder.max_pending_size`, and the stage refused the excess on
their `start` messages while the gateway was still writing their frames; the gateway got INTERNAL and answered its
client UNAVAILABLE. Now a request past the limit waits its turn (its frames unread), only a full queue is refused
(RESOURCE_EXHAUSTED with the stage's RetryInfo, kept by the gateway), and a waiting request that is given up leaves
the queue.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch

import services.vision.build as build
from gateway.clients.encoders import VisionClient, VisionItemInput, VisionItemOutput
from omnimesh.v1 import vision_pb2_grpc
from runtime.config import load_mesh_config
from runtime.errors import DeadlineExceeded, InvalidArgument, ResourceExhausted
from runtime.metrics import Metrics
from runtime.server import StageServer
from services.vision.service import VisionService
from tests.integration.vision.vision_calls import start_msg

LIMIT = 64  # patches: one 128x128 image (8x8 patches of 16 px) fills the stage
FULL = (1, 8, 8)


def image(seed: int) -> VisionItemInput:
    gen = torch.Generator().manual_seed(seed)
    return VisionItemInput(torch.randint(0, 256, (1, 128, 128, 3), generator=gen, dtype=torch.uint8), FULL, False)


Scenario = Callable[[VisionClient, VisionService, str], Awaitable[Any]]


def run_stage(demo_ckpt: Path, monkeypatch: pytest.MonkeyPatch, scenario: Scenario, max_waiting: int = 8) -> Any:
    """Runs `scenario(client, service, address)` against a vision stage holding at most LIMIT patches of work."""
    seen: dict[str, VisionService] = {}
    real_service = build.VisionService

    def keep(*args: Any) -> VisionService:  # the real service, kept to look at its queue
        seen["service"] = real_service(*args)
        return seen["service"]

    monkeypatch.setattr(build, "VisionService", keep)
    mesh = load_mesh_config(None, {
        "vision.server.metrics_port": -1, "vision.encoder.max_batch_size": LIMIT,
        "vision.encoder.max_request_size": LIMIT, "vision.encoder.max_pending_size": LIMIT,
        "vision.encoder.max_waiting": max_waiting})

    async def run() -> Any:
        server = StageServer("vision", "r0", mesh.vision.server, Metrics("vision", "r0"))
        close = await build.build_vision(mesh, demo_ckpt, server)
        ports = await server.start()
        addr = f"127.0.0.1:{ports.grpc_port}"
        try:
            async with grpc.aio.insecure_channel(addr) as channel:
                client = VisionClient(channel, Metrics("gateway", "t"))
                return await asyncio.wait_for(scenario(client, seen["service"], addr), 60)
        finally:
            await server.stop(0)
            close()

    return asyncio.run(run())


async def hold_the_stage(addr: str) -> tuple[grpc.aio.Channel, grpc.aio.StreamStreamCall]:
    """An Encode call that sends its `start` (LIMIT patches) and no frames: the stage holds its work while it waits."""
    channel = grpc.aio.insecure_channel(addr)
    call = vision_pb2_grpc.VisionStub(channel).Encode()
    await call.write(start_msg((False, list(FULL)), request_id="holder"))
    return channel, call


async def until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_requests_past_the_pending_limit_wait_their_turn_and_all_finish(demo_ckpt: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(client: VisionClient, service: VisionService, addr: str) -> list[list[VisionItemOutput]]:
        num_deepstack = len(service.encoder.tower.cfg.deepstack_visual_indexes)
        return await asyncio.gather(*(client.encode(f"r{i}", [image(i)], num_deepstack, timeout=30)
                                      for i in range(4)))  # each fills the stage alone

    outs = run_stage(demo_ckpt, monkeypatch, scenario)
    assert len(outs) == 4
    for (out,) in outs:
        assert out.merged.shape[0] == LIMIT // 4  # 2x2 patches merge into one token


def test_past_max_waiting_the_gateway_gets_resource_exhausted_with_the_stages_retry(
        demo_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(client: VisionClient, service: VisionService, addr: str) -> ResourceExhausted:
        channel, holder = await hold_the_stage(addr)
        try:
            await until(lambda: service.pending.held == LIMIT, "the holder's admission")
            with pytest.raises(ResourceExhausted) as err:
                await client.encode("refused", [image(0)], 3, timeout=30)
            holder.cancel()
            await until(lambda: service.pending.held == 0, "the holder's release")
            (out,) = await client.encode("after", [image(1)], 3, timeout=30)  # the stage serves again
            assert out.merged.shape[0] == LIMIT // 4
            return err.value
        finally:
            await channel.close()

    err = run_stage(demo_ckpt, monkeypatch, scenario, max_waiting=0)
    assert err.message.startswith("vision is at capacity: the vision stage holds 64 patches")
    assert "vision.encoder.max_waiting=0" in err.message
    assert err.retry_after_s == 1.0  # the stage's RetryInfo, passed on to the gateway's client


def test_a_waiting_request_whose_deadline_passes_leaves_the_queue(demo_ckpt: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(client: VisionClient, service: VisionService, addr: str) -> None:
        channel, holder = await hold_the_stage(addr)
        try:
            await until(lambda: service.pending.held == LIMIT, "the holder's admission")
            with pytest.raises(DeadlineExceeded):
                await client.encode("late", [image(0)], 3, timeout=0.5)
            await until(lambda: service.pending.num_waiting == 0, "the late request to leave the queue")
            assert service.pending.held == LIMIT  # it never held anything
            holder.cancel()
            await until(lambda: service.pending.held == 0, "the holder's release")
        finally:
            await channel.close()

    run_stage(demo_ckpt, monkeypatch, scenario)


def test_bad_frames_reach_the_gateway_as_invalid_argument_naming_the_field(demo_ckpt: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(client: VisionClient, service: VisionService, addr: str) -> InvalidArgument:
        two_frames = VisionItemInput(torch.zeros(2, 128, 128, 3, dtype=torch.uint8), FULL, False)  # an image has 1
        with pytest.raises(InvalidArgument) as err:
            await client.encode("bad", [two_frames], 3, timeout=30)
        await until(lambda: service.pending.held == 0, "the refused request's release")
        return err.value

    err = run_stage(demo_ckpt, monkeypatch, scenario)
    assert "frames[item.0]: has shape [2, 128, 128, 3]" in err.message, err.message

