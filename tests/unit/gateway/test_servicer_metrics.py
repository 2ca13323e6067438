"""The availability and latency SLIs count every Chat by the status it really ended with: the servicer on a real
grpc.aio server on loopback, in front of a service that answers, fails or has a bug."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import grpc
import pytest

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from runtime.config import GatewayConfig, ServerConfig
from runtime.errors import Unavailable
from runtime.metrics import Metrics
from runtime.server import StageServer
from gateway.request_decode import SERVICE_NAME, add_omni_servicer
from gateway.service import DoneEvent
from gateway.servicer import OmniServicer


class ScriptedService:
    """Stands in for OmniService: answers, fails with a domain error, or raises what no code expects (a bug)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def chat(self, chat, timeout: float | None) -> AsyncIterator[DoneEvent]:
        text = chat.turns[0].parts[0]
        if text == "bug":
            raise KeyError("a bug")
        if text == "down":
            raise Unavailable("thinker stage is down", stage="thinker")
        yield DoneEvent(common_pb2.FINISH_REASON_LENGTH if text == "long" else common_pb2.FINISH_REASON_STOP)


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[grpc.aio.Channel, Metrics]]:
    """The servicer on a StageServer (interceptor included) on a free loopback port, and a channel to it."""
    metrics = Metrics("gateway", "t")
    server = StageServer("gateway", "t", ServerConfig(port=0, metrics_port=-1), metrics)
    servicer = OmniServicer(ScriptedService(metrics), GatewayConfig(), omni_pb2.OmniInfo())
    server.add_service(partial(add_omni_servicer, max_request_bytes=1 << 20), servicer, SERVICE_NAME)
    ports = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc_port}") as channel:
            yield channel, metrics
    finally:
        await server.stop(0)


async def code_of(events: AsyncIterator[object]) -> grpc.StatusCode:
    try:
        [_ async for _ in events]
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def chat_codes(texts: list[str]) -> tuple[list[grpc.StatusCode], Metrics]:
    codes = []
    async with serving() as (channel, metrics):
        stub = omni_pb2_grpc.OmniStub(channel)
        for text in texts:
            msgs = [omni_pb2.Message(role="user", content=[omni_pb2.ContentPart(text=text)])] if text else []
            codes.append(await code_of(stub.Chat(omni_pb2.ChatRequest(messages=msgs), timeout=10)))
    return codes, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, {"stage": "gateway", "replica": "t", "model_name": "", **labels})
    return value or 0.0


def test_every_failure_is_counted_by_its_status_and_only_answers_are_timed() -> None:
    codes, metrics = asyncio.run(chat_codes(["hi", "bug", "down", "", "hi"]))
    assert codes == [grpc.StatusCode.OK, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE,
                     grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK]
    counted = {code: sample(metrics, "omnimesh_requests_total", code=code, outcome=outcome) for code, outcome in (
        ("OK", "ok"), ("INTERNAL", "error"), ("UNAVAILABLE", "error"), ("INVALID_ARGUMENT", "error"))}
    assert counted == {"OK": 2, "INTERNAL": 1, "UNAVAILABLE": 1, "INVALID_ARGUMENT": 1}
    assert sample(metrics, "omnimesh_e2e_request_latency_seconds_count") == 2
    assert sample(metrics, "omnimesh_requests_in_flight") == 0


def test_finished_requests_are_split_by_reason() -> None:
    """stop and length from the Done event of an answer; every request that did not end OK is an abort."""
    _, metrics = asyncio.run(chat_codes(["hi", "long", "bug", "down", "", "hi"]))
    counted = {r: sample(metrics, "omnimesh_finished_requests_total", finish_reason=r) for r in ("stop", "length",
                                                                                               "abort")}
    assert counted == {"stop": 2, "length": 1, "abort": 3}


@pytest.mark.parametrize("payload", [b"\xff\xff", b"\x0a\x02\xc3\x28"])
def test_undecodable_bytes_are_counted_invalid_argument(payload: bytes) -> None:
    async def run() -> tuple[grpc.StatusCode, Metrics]:
        async with serving() as (channel, metrics):
            call = channel.unary_stream("/omnimesh.v1.Omni/Chat", request_serializer=lambda b: b,
                                        response_deserializer=omni_pb2.ChatEvent.FromString)
            return await code_of(call(payload, timeout=10)), metrics

    code, metrics = asyncio.run(run())
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert sample(metrics, "omnimesh_requests_total", code="INVALID_ARGUMENT", outcome="error") == 1
    assert sample(metrics, "omnimesh_grpc_server_handled_total", grpc_service="omnimesh.v1.Omni", grpc_method="Chat",
                  grpc_code="INVALID_ARGUMENT") == 1
