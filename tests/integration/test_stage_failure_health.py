"""Every GPU stage, built as its process builds it, turns its health NOT_SERVING when its compute has failed for
good: the thinker's and talker's engine thread dies (its next step is made to raise, as a lost device would); the
vision and audio encoders raise an accelerator error (torch.AcceleratorError, which stays with a CUDA context); or
any of them hangs inside one step past `stall_timeout_s` (a hung device neither returns nor raises). A request drives
each; an error an encoder can recover from (out of memory) fails its request and nothing else."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc
from runtime.config import ServerConfig, load_mesh_config
from runtime.engine.engine import Engine
from runtime.metrics import Metrics
from runtime.server import StageServer
from services.audio.build import build_audio
from services.audio.model.encoder import AudioEncoder
from services.talker.build import build_talker
from services.talker.model.generate import TalkerRunner
from services.thinker.build import build_thinker
from services.vision.build import build_vision
from services.vision.model.tower import VisionTower
from tests.integration.audio.audio_calls import clip, encode, request
from tests.integration.talker.talker_calls import speak, text_only
from tests.integration.vision.vision_calls import encode_raw, frame_msgs, frames, start_msg

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def _device_lost(*args: object, **kwargs: object) -> None:
    raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")


def _out_of_memory(*args: object, **kwargs: object) -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


async def _generate(addr: str) -> None:
    async with grpc.aio.insecure_channel(addr) as channel:
        start = thinker_pb2.GenerateStart(request_id="t", token_ids=[1, 2, 3],
                                          sampling=common_pb2.SamplingParams(max_tokens=2))
        async for _ in thinker_pb2_grpc.ThinkerStub(channel).Generate(iter([thinker_pb2.GenerateRequest(start=start)])):
            pass


def _image(addr: str) -> Awaitable[object]:
    return encode_raw(addr, [start_msg((False, [1, 2, 2])), *frame_msgs("item.0", frames(1, 32, 32))])


STAGES: dict[str, tuple[Callable, tuple[type, str], Callable[[str], Awaitable[object]]]] = {
    "thinker": (build_thinker, (Engine, "step"), _generate),
    "talker": (build_talker, (TalkerRunner, "step"), lambda addr: speak(addr, text_only())),
    "vision": (build_vision, (VisionTower, "forward"), _image),
    "audio": (build_audio, (AudioEncoder, "encode"), lambda addr: encode(addr, request([clip(1.0)]))),
}


MESH = {"thinker.engine.kv_cache_bytes": 4 << 20, "talker.speech.max_rows": 2}


@asynccontextmanager
async def _running(stage: str, demo_ckpt: Path, overrides: dict[str, object]
                   ) -> AsyncIterator[tuple[str, Callable[[], Awaitable[int]]]]:  # fmt: skip
    """The stage built and served as its process does; yields its address and a health check of service ""."""
    server = StageServer(stage, "r0", ServerConfig(port=0, metrics_port=-1), Metrics(stage, "r0"))
    close = await STAGES[stage][0](load_mesh_config(None, {**MESH, **overrides}), demo_ckpt, server)
    ports = await server.start()
    addr = f"127.0.0.1:{ports.grpc_port}"
    try:
        async with grpc.aio.insecure_channel(addr) as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status() -> int:
                return (await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)).status

            yield addr, status
    finally:
        await server.stop(0)
        close()


async def _settled(status: Callable[[], Awaitable[int]], polls: int) -> int:
    """Health once it left SERVING, or still SERVING after `polls` tenths of a second."""
    for _ in range(polls):
        if (now := await status()) != SERVING:
            break
        await asyncio.sleep(0.1)
    return now


def _statuses_around_a_failure(stage: str, demo_ckpt: Path, monkeypatch: pytest.MonkeyPatch,
                               fault: Callable[..., None]) -> tuple[list[int], grpc.StatusCode]:
    """Health before, the failed request's code, and health once it settled (up to 3 s after the failure)."""
    _, (cls, method), call = STAGES[stage]

    async def main() -> tuple[list[int], grpc.StatusCode]:
        async with _running(stage, demo_ckpt, {}) as (addr, status):
            before = await status()
            monkeypatch.setattr(cls, method, fault)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await asyncio.wait_for(call(addr), 30)
            return [before, await _settled(status, 30)], caught.value.code()  # 3 s: six polls of the watch

    return asyncio.run(main())


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_device_fault_makes_the_stage_not_serving(stage: str, demo_ckpt: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    statuses, code = _statuses_around_a_failure(stage, demo_ckpt, monkeypatch, _device_lost)
    assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)
    assert statuses == [SERVING, NOT_SERVING]


@pytest.mark.parametrize("stage", ["audio", "vision"])
def test_an_encoder_out_of_memory_fails_only_its_request(stage: str, demo_ckpt: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    statuses, _ = _statuses_around_a_failure(stage, demo_ckpt, monkeypatch, _out_of_memory)
    assert statuses == [SERVING, SERVING]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_step_that_hangs_past_the_stall_timeout_makes_the_stage_not_serving(
        stage: str, demo_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, (cls, method), call = STAGES[stage]
    release = threading.Event()

    def hang(*args: object, **kwargs: object) -> None:
        release.wait(30)  # the device never answers, until the test lets go
        raise RuntimeError("released by the test")

    async def main() -> list[int]:
        try:
            async with _running(stage, demo_ckpt, {f"{stage}.stall_timeout_s": 1.0}) as (addr, status):
                seen = [await status()]
                monkeypatch.setattr(cls, method, hang)
                request = asyncio.ensure_future(call(addr))
                seen.append(await _settled(status, 60))  # 6 s: the 1 s limit, then a poll of the watch
                release.set()
                with pytest.raises(grpc.aio.AioRpcError):
                    await asyncio.wait_for(request, 30)
                return seen
        finally:
            release.set()

    assert asyncio.run(main()) == [SERVING, NOT_SERVING]
