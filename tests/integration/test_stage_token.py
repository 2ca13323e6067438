"""A stage given OMNIMESH_STAGE_TOKEN refuses every call without it (health excepted, for kubelet probes), counted
by its code; a gateway given the same token is served. Real processes on loopback."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, omni_pb2_grpc, thinker_pb2, thinker_pb2_grpc
from runtime.stage_auth import STAGE_TOKEN_ENV
from tests.integration.client import chat_error, chat_request, collect
from tests.integration.conftest import TEST_MESH
from tests.integration.mesh_process import Proc, metric_value, scrape, start_stage
from tests.integration.test_gateway_errors import start_gateway

TOKEN = "stage-secret-7"


@pytest.fixture(scope="module")
def guarded_thinker(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(STAGE_TOKEN_ENV, TOKEN)
        thinker = start_stage("thinker", demo_ckpt, TEST_MESH, tmp_path_factory.mktemp("guarded"))
    yield thinker
    assert thinker.stop() == 0


def addr(proc: Proc) -> str:
    return f"127.0.0.1:{proc.ports['grpc_port']}"


async def info_code(target: str, metadata) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            await thinker_pb2_grpc.ThinkerStub(channel).Info(common_pb2.InfoRequest(), metadata=metadata, timeout=10)
        except grpc.aio.AioRpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def test_calls_without_the_token_are_unauthenticated(guarded_thinker: Proc) -> None:
    target = addr(guarded_thinker)
    for metadata in (None, [("authorization", "Bearer wrong")], [("authorization", TOKEN)]):
        assert asyncio.run(info_code(target, metadata)) == grpc.StatusCode.UNAUTHENTICATED
    assert asyncio.run(info_code(target, [("authorization", f"Bearer {TOKEN}")])) == grpc.StatusCode.OK
    handled = metric_value(scrape(guarded_thinker.ports["metrics_port"]), "omnimesh_grpc_server_handled_total",
                           grpc_method="Info", grpc_code="UNAUTHENTICATED")
    assert handled >= 3


def test_a_stream_without_the_token_is_refused_before_it_is_read(guarded_thinker: Proc) -> None:
    async def generate() -> grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(addr(guarded_thinker)) as channel:
            start = thinker_pb2.GenerateStart(request_id="r", token_ids=[1, 2, 3])
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                [_ async for _ in thinker_pb2_grpc.ThinkerStub(channel).Generate(
                    iter([thinker_pb2.GenerateRequest(start=start)]), timeout=10)]
            return caught.value

    err = asyncio.run(generate())
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "needs the stage token" in err.details()


def test_health_stays_open_for_probes(guarded_thinker: Proc) -> None:
    async def check() -> int:
        async with grpc.aio.insecure_channel(addr(guarded_thinker)) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            return reply.status

    assert asyncio.run(check()) == health_pb2.HealthCheckResponse.SERVING


def test_a_gateway_with_the_token_is_served(demo_ckpt: Path, mesh_config: Path, guarded_thinker: Proc) -> None:
    gw = start_gateway(demo_ckpt, mesh_config, addr(guarded_thinker), env={STAGE_TOKEN_ENV: TOKEN})
    try:
        async def chat() -> list[int]:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.ports['grpc_port']}") as channel:
                tokens, _ = await collect(omni_pb2_grpc.OmniStub(channel), chat_request(
                    "hi", common_pb2.SamplingParams(max_tokens=3)), timeout=30)
                return tokens

        assert len(asyncio.run(chat())) == 3
    finally:
        assert gw.stop() == 0


def test_a_gateway_without_the_token_says_which_stage_refused(demo_ckpt: Path, mesh_config: Path,
                                                             guarded_thinker: Proc) -> None:
    gw = start_gateway(demo_ckpt, mesh_config, addr(guarded_thinker))
    try:
        err = asyncio.run(chat_error(f"127.0.0.1:{gw.ports['grpc_port']}", chat_request("hi")))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert "thinker stage refused the gateway (UNAUTHENTICATED)" in err.details()
        assert STAGE_TOKEN_ENV in err.details()
    finally:
        assert gw.stop() == 0
