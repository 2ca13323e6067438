"""A tensor-parallel thinker (TP2 on CPU, built and served as its process does) never hangs on a lost rank: a worker
killed while idle turns the stage NOT_SERVING and the next request fails UNAVAILABLE; a worker that stops answering
mid-step fails that step at the collectives' timeout (stall_timeout_s). A split the checkpoint cannot take is
refused before any worker starts."""
from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc
from runtime.config import ServerConfig, load_mesh_config
from runtime.config_section import ConfigError
from runtime.metrics import Metrics
from runtime.server import StageServer
from services.thinker.build import build_thinker

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
TIMEOUT_S = 5.0  # stall_timeout_s: the collectives' timeout


@asynccontextmanager
async def _tp2_thinker(demo_ckpt: Path) -> AsyncIterator[tuple[str, Callable[[], Awaitable[int]], int]]:
    """The stage's address, its health, and its worker's pid."""
    mesh = load_mesh_config(None, {"thinker.tensor_parallel": 2, "thinker.cpu_threads": 1,
                                   "thinker.stall_timeout_s": TIMEOUT_S, "thinker.engine.kv_cache_bytes": 4 << 20})
    server = StageServer("thinker", "r0", ServerConfig(port=0, metrics_port=-1), Metrics("thinker", "r0"))
    close = await build_thinker(mesh, demo_ckpt, server)
    [worker] = [p for p in multiprocessing.active_children() if p.name == "thinker-tp1"]
    addr = f"127.0.0.1:{(await server.start()).grpc_port}"
    try:
        async with grpc.aio.insecure_channel(addr) as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def status() -> int:
                return (await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)).status

            yield addr, status, worker.pid
    finally:
        await server.stop(0)
        close()


async def _generate(addr: str) -> None:
    start = thinker_pb2.GenerateStart(request_id="t", token_ids=[1, 2, 3],
                                      sampling=common_pb2.SamplingParams(max_tokens=4))
    async with grpc.aio.insecure_channel(addr) as channel:
        async for _ in thinker_pb2_grpc.ThinkerStub(channel).Generate(iter([thinker_pb2.GenerateRequest(start=start)])):
            pass


async def _settled(status: Callable[[], Awaitable[int]], seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while (now := await status()) == SERVING and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return now


def test_a_worker_killed_while_idle_turns_the_stage_not_serving(demo_ckpt: Path) -> None:
    async def main() -> None:
        async with _tp2_thinker(demo_ckpt) as (addr, status, pid):
            assert await status() == SERVING
            async with grpc.aio.insecure_channel(addr) as channel:
                info = await thinker_pb2_grpc.ThinkerStub(channel).Info(common_pb2.InfoRequest(), timeout=5)
            assert (info.device, info.limits["tensor_parallel"]) == ("cpu,cpu", 2)
            os.kill(pid, signal.SIGKILL)
            assert await _settled(status, 5) == NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await asyncio.wait_for(_generate(addr), 30)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "tensor-parallel rank 1" in caught.value.details()

    asyncio.run(main())


def test_a_worker_that_stops_answering_fails_the_step_at_the_timeout(demo_ckpt: Path) -> None:
    async def main() -> None:
        async with _tp2_thinker(demo_ckpt) as (addr, status, pid):
            await _generate(addr)  # both ranks step
            os.kill(pid, signal.SIGSTOP)  # alive, holding its sockets, answering nothing
            try:
                t0 = time.monotonic()
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await asyncio.wait_for(_generate(addr), 60)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
                assert time.monotonic() - t0 < 4 * TIMEOUT_S
                assert await _settled(status, 3) == NOT_SERVING
            finally:
                os.kill(pid, signal.SIGKILL)

    asyncio.run(main())


def test_a_split_the_checkpoint_cannot_take_is_refused_before_any_worker_starts(demo_ckpt: Path) -> None:
    async def main() -> None:
        mesh = load_mesh_config(None, {"thinker.tensor_parallel": 3})  # the demo thinker has 4 heads
        server = StageServer("thinker", "r0", ServerConfig(port=0, metrics_port=-1), Metrics("thinker", "r0"))
        await build_thinker(mesh, demo_ckpt, server)

    with pytest.raises(ConfigError, match=r"thinker.tensor_parallel=3 .* text_config.num_attention_heads \(4\)"):
        asyncio.run(main())
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("thinker-tp")]
