"""A thinker that dies mid-answer and comes back on the same address: the open stream ends UNAVAILABLE naming the
thinker, the gateway stays up, and it serves again within a couple of seconds of the thinker's return, however long
the thinker was away (the channel's reconnect backoff is capped; gRPC's default grows to 120 s)."""
from __future__ import annotations

import asyncio
import time

import grpc

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from runtime.server import READY_PREFIX
from tests.integration.client import chat_request, collect
from tests.integration.conftest import python_module
from tests.integration.mesh_process import Proc, start
from tests.integration.test_gateway_errors import free_port, start_gateway

OUTAGE_S = 12.0  # long enough for gRPC's default backoff to wait several seconds past the thinker's return


def _thinker(demo_ckpt, mesh_config, port: int) -> Proc:
    return start(python_module("services.thinker", "--model", str(demo_ckpt), "--config", str(mesh_config),
                               "--port", str(port), "--metrics-port", "-1"), READY_PREFIX, timeout=60)


async def _cut_mid_answer(addr: str, thinker: Proc) -> grpc.aio.AioRpcError | omni_pb2.ChatEvent:
    """A long answer, its first text read, then the thinker killed; what the stream ends with."""
    async with grpc.aio.insecure_channel(addr) as channel:
        call = omni_pb2_grpc.OmniStub(channel).Chat(chat_request("hi", common_pb2.SamplingParams(
            max_tokens=900, ignore_eos=True)), timeout=60)
        await call.read()
        thinker.proc.kill()
        try:
            last = None
            while (ev := await call.read()) is not grpc.aio.EOF:
                last = ev
            return last
        except grpc.aio.AioRpcError as err:
            return err


async def _seconds_until_served(addr: str, limit_s: float) -> float:
    t0 = time.monotonic()
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)
        while time.monotonic() - t0 < limit_s:
            try:
                tokens, _ = await collect(stub, chat_request("hi", common_pb2.SamplingParams(max_tokens=2)))
                if tokens:
                    return time.monotonic() - t0
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.UNAVAILABLE, err
            await asyncio.sleep(0.1)
    return float("inf")


def test_the_gateway_serves_again_soon_after_the_thinker_returns(demo_ckpt, mesh_config) -> None:
    port = free_port()
    thinker = _thinker(demo_ckpt, mesh_config, port)
    gateway = start_gateway(demo_ckpt, mesh_config, f"127.0.0.1:{port}")
    addr = f"127.0.0.1:{gateway.ports['grpc_port']}"
    try:
        ended = asyncio.run(_cut_mid_answer(addr, thinker))
        thinker.proc.wait(timeout=10)
        if isinstance(ended, grpc.aio.AioRpcError):
            assert ended.code() == grpc.StatusCode.UNAVAILABLE and "thinker" in ended.details()
        else:  # text had been streamed: the failure arrives as the stream's last event
            assert ended.HasField("error") and ended.error.code == "UNAVAILABLE" and ended.error.stage == "thinker"
        time.sleep(OUTAGE_S)
        thinker = _thinker(demo_ckpt, mesh_config, port)
        assert asyncio.run(_seconds_until_served(addr, 30.0)) < 3.0
    finally:
        assert gateway.stop() == 0
        thinker.stop()
