"""Cancellation frees the thinker's KV at once; SIGTERM drains in-flight streams before the process exits."""
from __future__ import annotations

import asyncio
import signal
import time

import grpc
import pytest

from omnimesh.v1 import common_pb2, omni_pb2_grpc, thinker_pb2, thinker_pb2_grpc
from runtime.server import READY_PREFIX
from tests.integration.client import chat_request
from tests.integration.conftest import python_module
from tests.integration.mesh_process import Proc, metric_value, scrape, start

LONG = common_pb2.SamplingParams(max_tokens=900, ignore_eos=True, seed=1)


def kv_usage(metrics_port: int) -> float:
    return metric_value(scrape(metrics_port), "omnimesh_kv_usage_ratio")


async def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


def test_client_cancel_mid_stream_returns_thinker_kv_to_zero(gateway_addr: str, mesh: Proc) -> None:
    metrics_port = mesh.ports["thinker"]["metrics_port"]

    async def scenario() -> tuple[float, bool]:
        async with grpc.aio.insecure_channel(gateway_addr) as channel:
            call = omni_pb2_grpc.OmniStub(channel).Chat(chat_request("Tell me everything", LONG))
            seen = 0
            async for ev in call:
                seen += len(ev.text.token_ids)
                if seen >= 5:
                    break
            during = kv_usage(metrics_port)
            call.cancel()
            freed = await wait_until(lambda: kv_usage(metrics_port) == 0.0)
            return during, freed

    during, freed = asyncio.run(scenario())
    assert during > 0.0
    assert freed


def test_deadline_frees_thinker_kv(gateway_addr: str, mesh: Proc) -> None:
    metrics_port = mesh.ports["thinker"]["metrics_port"]

    async def scenario() -> bool:
        async with grpc.aio.insecure_channel(gateway_addr) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in omni_pb2_grpc.OmniStub(channel).Chat(chat_request("Go on", LONG), timeout=0.7):
                    pass
            assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            return await wait_until(lambda: kv_usage(metrics_port) == 0.0)

    assert asyncio.run(scenario())


@pytest.fixture()
def lone_thinker(demo_ckpt, mesh_config) -> Proc:
    proc = start(python_module("services.thinker", "--model", str(demo_ckpt), "--config", str(mesh_config),
                               "--port", "0", "--metrics-port", "-1"), READY_PREFIX, timeout=60)
    yield proc
    proc.stop()


def test_sigterm_drains_in_flight_streams_then_refuses_new_ones(lone_thinker: Proc) -> None:
    addr = f"127.0.0.1:{lone_thinker.ports['grpc_port']}"
    start_msg = thinker_pb2.GenerateRequest(start=thinker_pb2.GenerateStart(
        request_id="drain", token_ids=[151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198],
        sampling=common_pb2.SamplingParams(max_tokens=60, ignore_eos=True, temperature=0)))

    async def requests():
        yield start_msg

    async def scenario() -> tuple[int, int, grpc.StatusCode]:
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = thinker_pb2_grpc.ThinkerStub(channel)
            tokens, finished = 0, 0
            async for msg in stub.Generate(requests()):
                if msg.HasField("tokens"):
                    if tokens == 0:
                        lone_thinker.proc.send_signal(signal.SIGTERM)
                        await asyncio.sleep(0.2)  # let the drain begin while the stream is in flight
                    tokens += len(msg.tokens.token_ids)
                elif msg.HasField("finished"):
                    finished = msg.finished.finish_reason
            try:
                async for _ in stub.Generate(requests(), timeout=3):
                    pass
                refused = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as err:
                refused = err.code()
            return tokens, finished, refused

    tokens, finished, refused = asyncio.run(scenario())
    assert tokens == 60
    assert finished == common_pb2.FINISH_REASON_LENGTH
    assert refused == grpc.StatusCode.UNAVAILABLE
    assert lone_thinker.proc.wait(timeout=30) == 0


def test_a_full_thinker_answers_resource_exhausted_with_retry_info(demo_ckpt, tmp_path) -> None:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    from tests.integration.mesh_process import start_stage

    mesh = {"thinker": {"engine": {"kv_cache_bytes": 16 << 20, "max_num_seqs": 1, "max_batch_tokens": 64,
                                   "max_waiting_seqs": 0}}}
    thinker = start_stage("thinker", demo_ckpt, mesh, tmp_path)
    addr = f"127.0.0.1:{thinker.ports['grpc_port']}"
    prompt = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]

    def request(max_tokens: int):
        async def it():
            yield thinker_pb2.GenerateRequest(start=thinker_pb2.GenerateStart(
                request_id="full", token_ids=prompt,
                sampling=common_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
        return it()

    async def scenario() -> grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = thinker_pb2_grpc.ThinkerStub(channel)
            busy = stub.Generate(request(400))
            await busy.read()  # the one row is taken
            try:
                async for _ in stub.Generate(request(2)):
                    pass
            except grpc.aio.AioRpcError as err:
                return err
            finally:
                busy.cancel()
        raise AssertionError("a second request was admitted past max_num_seqs + max_waiting_seqs")

    try:
        err = asyncio.run(scenario())
    finally:
        assert thinker.stop() == 0
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_waiting_seqs" in err.details()
    kinds = [d for d in rpc_status.from_call(err).details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
    assert kinds
