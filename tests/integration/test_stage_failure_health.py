"""The thinker and talker stages, built as their processes build them, turn their health NOT_SERVING when their
engine's thread dies: the engine's next step is made to raise, as a lost device would, and a request drives it."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc
from runtime.config import ServerConfig, load_mesh_config
from runtime.engine.engine import Engine
from runtime.metrics import Metrics
from runtime.server import StageServer
from services.talker.build import build_talker
from services.talker.model.generate import TalkerRunner
from services.thinker.build import build_thinker
from tests.integration.talker.talker_calls import speak, text_only

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def _device_lost(*args: object, **kwargs: object) -> None:
    raise RuntimeError("device lost")


async def _generate(addr: str) -> None:
    async with grpc.aio.insecure_channel(addr) as channel:
        start = thinker_pb2.GenerateStart(request_id="t", token_ids=[1, 2, 3],
                                          sampling=common_pb2.SamplingParams(max_tokens=2))
        async for _ in thinker_pb2_grpc.ThinkerStub(channel).Generate(iter([thinker_pb2.GenerateRequest(start=start)])):
            pass


STAGES: dict[str, tuple[Callable, tuple[type, str], Callable[[str], Awaitable[object]]]] = {
    "thinker": (build_thinker, (Engine, "step"), _generate),
    "talker": (build_talker, (TalkerRunner, "step"), lambda addr: speak(addr, text_only())),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_an_engine_that_dies_makes_its_stage_not_serving(stage: str, demo_ckpt: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    build, (cls, method), call = STAGES[stage]
    mesh = load_mesh_config(None, {"thinker.engine.kv_cache_bytes": 4 << 20, "talker.speech.max_rows": 2})

    async def main() -> tuple[list[int], grpc.StatusCode]:
        server = StageServer(stage, "r0", ServerConfig(port=0, metrics_port=-1), Metrics(stage, "r0"))
        close = await build(mesh, demo_ckpt, server)
        ports = await server.start()
        addr = f"127.0.0.1:{ports.grpc_port}"
        try:
            async with grpc.aio.insecure_channel(addr) as channel:
                health = health_pb2_grpc.HealthStub(channel)

                async def status() -> int:
                    return (await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)).status

                seen = [await status()]
                monkeypatch.setattr(cls, method, _device_lost)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await asyncio.wait_for(call(addr), 30)
                for _ in range(50):
                    if (now := await status()) != SERVING:
                        break
                    await asyncio.sleep(0.1)
                return [*seen, now], caught.value.code()
        finally:
            await server.stop(0)
            close()

    statuses, code = asyncio.run(main())
    assert code == grpc.StatusCode.UNAVAILABLE
    assert statuses == [SERVING, NOT_SERVING]
