"""StageServer and the error interceptor over a real grpc.aio server on 127.0.0.1: codes, details, metrics, health,
reflection, drain."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from runtime.config import ServerConfig
from runtime.errors import (
    Cancelled,
    DeadlineExceeded,
    InvalidArgument,
    OmniError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from runtime.heartbeat import Heartbeat
from runtime.metrics import Metrics
from runtime.server import READY_PREFIX, BoundPorts, StageServer, announce_ready, server_options

SERVICE = "omnimesh.test.Probe"
ERRORS: dict[str, Callable[[], Exception]] = {
    "invalid": lambda: InvalidArgument("messages[0].role", "is 'bot'; must be user"),
    "exhausted": lambda: ResourceExhausted("queue full", retry_after_s=3.0),
    "unavailable": lambda: Unavailable("vision is down", stage="vision"),
    "unauthenticated": lambda: Unauthenticated("no key"),
    "unimplemented": lambda: Unimplemented("not yet"),
    "deadline": lambda: DeadlineExceeded("too slow"),
    "cancelled": lambda: Cancelled("gone"),
    "internal": lambda: OmniError("broken invariant"),
}
CODES = {
    "invalid": "INVALID_ARGUMENT", "exhausted": "RESOURCE_EXHAUSTED", "unavailable": "UNAVAILABLE",
    "unauthenticated": "UNAUTHENTICATED", "unimplemented": "UNIMPLEMENTED", "deadline": "DEADLINE_EXCEEDED",
    "cancelled": "CANCELLED", "internal": "INTERNAL",
}


async def _act(kind: str, context: grpc.aio.ServicerContext) -> None:
    if kind == "abort":
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
    if kind == "slow":
        await asyncio.sleep(0.3)
    elif kind in ERRORS:
        raise ERRORS[kind]()
    elif kind == "plain":
        raise RuntimeError("secret stack detail")


async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await _act(request.decode(), context)
    return b"ok:" + request


async def server_stream(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    yield b"first"
    await _act(request.decode(), context)
    yield b"second"


async def client_stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
    seen = [r async for r in requests]
    await _act(seen[-1].decode(), context)
    return b",".join(seen)


async def bidi(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for r in requests:
        yield b"echo:" + r
        await _act(r.decode(), context)


def probe_handler() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
    })


def add_probe(handler: grpc.GenericRpcHandler, server: grpc.aio.Server) -> None:
    server.add_generic_rpc_handlers((handler,))


@asynccontextmanager
async def running(metrics_port: int = -1, drain_grace_s: float = 1.0,
                  ) -> AsyncIterator[tuple[StageServer, grpc.aio.Channel, BoundPorts]]:
    metrics = Metrics("thinker", "r0")
    srv = StageServer("thinker", "r0", ServerConfig(port=0, metrics_port=metrics_port, drain_grace_s=drain_grace_s),
                      metrics)
    srv.add_service(add_probe, probe_handler(), SERVICE)
    ports = await srv.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc_port}")
    try:
        yield srv, channel, ports
    finally:
        await channel.close()
        await srv.stop(0)


def handled(srv: StageServer, method: str, code: str) -> float:
    value = srv.metrics.registry.get_sample_value("omnimesh_grpc_server_handled_total", {
        "stage": "thinker", "replica": "r0", "model_name": "", "grpc_service": SERVICE, "grpc_method": method, "grpc_code": code})
    return value or 0.0


def started(srv: StageServer, method: str) -> float:
    return srv.metrics.registry.get_sample_value("omnimesh_grpc_server_started_total", {
        "stage": "thinker", "replica": "r0", "model_name": "", "grpc_service": SERVICE, "grpc_method": method}) or 0.0


async def eventually(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    """The server records a call's metrics just after the client has its status: wait for them."""
    end = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < end, "metrics never caught up"
        await asyncio.sleep(0.005)


def call(channel: grpc.aio.Channel, method: str) -> Any:
    path = f"/{SERVICE}/{method}"
    return {"Unary": channel.unary_unary, "ServerStream": channel.unary_stream, "ClientStream": channel.stream_unary,
            "Bidi": channel.stream_stream}[method](path)


async def invoke(channel: grpc.aio.Channel, method: str, kind: str) -> list[bytes]:
    """Runs one RPC that asks the servicer to behave as `kind`; returns what came back before any error."""
    rpc = call(channel, method)
    got: list[bytes] = []
    if method == "Unary":
        got.append(await rpc(kind.encode(), timeout=5))
    elif method == "ServerStream":
        async for r in rpc(kind.encode(), timeout=5):
            got.append(r)
    elif method == "ClientStream":
        got.append(await rpc(iter([b"a", kind.encode()]), timeout=5))
    else:
        async for r in rpc(iter([kind.encode()]), timeout=5):
            got.append(r)
    return got


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)


METHODS = ["Unary", "ServerStream", "ClientStream", "Bidi"]


@pytest.mark.parametrize("method", METHODS)
def test_every_domain_error_maps_to_its_code_with_details(method: str) -> None:
    async def main() -> None:
        async with running() as (srv, channel, _):
            for kind, make in ERRORS.items():
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await invoke(channel, method, kind)
                err = info.value
                assert err.code().name == CODES[kind], kind
                status = rpc_status.from_call(err)
                assert status is not None and status.message == make().message == err.details()
                infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
                assert len(infos) == 1
                await eventually(lambda: handled(srv, method, CODES[kind]) == 1)
            # every call was started and handled exactly once
            total = sum(handled(srv, method, c) for c in set(CODES.values()))
            assert started(srv, method) == total == len(ERRORS)

    run(main())


def test_rich_details_reach_the_client() -> None:
    async def main() -> None:
        async with running() as (_, channel, _p):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await invoke(channel, "Unary", "invalid")
            status = rpc_status.from_call(info.value)
            bad = error_details_pb2.BadRequest()
            assert status.details[0].Unpack(bad)
            assert [(v.field, v.description) for v in bad.field_violations] == [
                ("messages[0].role", "is 'bot'; must be user")]

            with pytest.raises(grpc.aio.AioRpcError) as info:
                await invoke(channel, "ServerStream", "exhausted")
            status = rpc_status.from_call(info.value)
            retry = error_details_pb2.RetryInfo()
            assert status.details[1].Unpack(retry) and retry.retry_delay.seconds == 3

            with pytest.raises(grpc.aio.AioRpcError) as info:
                await invoke(channel, "Bidi", "unavailable")
            einfo = error_details_pb2.ErrorInfo()
            assert rpc_status.from_call(info.value).details[0].Unpack(einfo)
            assert einfo.reason == "UNAVAILABLE" and einfo.metadata["stage"] == "vision"

    run(main())


@pytest.mark.parametrize("method", METHODS)
def test_success_and_partial_streams(method: str) -> None:
    async def main() -> None:
        async with running() as (srv, channel, _):
            ok = await invoke(channel, method, "fine")
            expected = {"Unary": [b"ok:fine"], "ServerStream": [b"first", b"second"], "ClientStream": [b"a,fine"],
                        "Bidi": [b"echo:fine"]}[method]
            assert ok == expected
            await eventually(lambda: handled(srv, method, "OK") == 1)
            if method in ("ServerStream", "Bidi"):
                # Responses sent before the error still reach the client.
                got: list[bytes] = []
                with pytest.raises(grpc.aio.AioRpcError):
                    arg = b"invalid" if method == "ServerStream" else iter([b"invalid"])
                    async for r in call(channel, method)(arg):
                        got.append(r)
                assert got == ([b"first"] if method == "ServerStream" else [b"echo:invalid"])
            labels = {"stage": "thinker", "replica": "r0", "model_name": "", "grpc_service": SERVICE, "grpc_method": method}
            await eventually(lambda: srv.metrics.registry.get_sample_value(
                "omnimesh_grpc_server_handling_seconds_count", labels) == started(srv, method))

    run(main())


@pytest.mark.parametrize("method", METHODS)
def test_an_unexpected_exception_is_counted_as_internal(method: str) -> None:
    async def main() -> None:
        async with running() as (srv, channel, _):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await invoke(channel, method, "plain")
            assert rpc_status.from_call(info.value) is None  # no rich status for a bug
            await eventually(lambda: handled(srv, method, "INTERNAL") == 1)

    run(main())


def test_an_unexpected_exception_is_internal_to_the_client_too() -> None:
    async def main() -> None:
        async with running() as (srv, channel, _):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await invoke(channel, "Unary", "plain")
            assert "secret stack detail" not in (info.value.details() or "")
            assert info.value.code() is grpc.StatusCode.INTERNAL

    run(main())


@pytest.mark.parametrize("method", METHODS)
def test_a_handler_abort_keeps_its_code(method: str) -> None:
    async def main() -> None:
        async with running() as (srv, channel, _):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await invoke(channel, method, "abort")
            assert info.value.code() is grpc.StatusCode.NOT_FOUND and info.value.details() == "no such thing"
            await eventually(lambda: handled(srv, method, "NOT_FOUND") == 1)
            assert handled(srv, method, "INTERNAL") == 0

    run(main())


@pytest.mark.parametrize("method", ["Unary", "ServerStream"])
def test_a_client_cancel_is_counted_as_cancelled(method: str) -> None:
    async def main() -> None:
        async with running() as (srv, channel, _):
            rpc = call(channel, method)(b"slow")
            if method == "ServerStream":
                assert await rpc.read() == b"first"
            else:
                await asyncio.sleep(0.05)  # the handler is sleeping
            rpc.cancel()
            await eventually(lambda: handled(srv, method, "CANCELLED") == 1)
            assert handled(srv, method, "OK") == 0

    run(main())


def test_unknown_method_is_unimplemented_and_not_counted() -> None:
    async def main() -> None:
        async with running() as (srv, channel, _):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await channel.unary_unary(f"/{SERVICE}/Nope")(b"", timeout=5)
            assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
            assert started(srv, "Nope") == 0

    run(main())


# --- StageServer: ports, health, reflection, drain ----------------------------------------------------------------

def test_start_binds_a_free_port_and_reports_serving() -> None:
    async def main() -> None:
        async with running() as (srv, channel, ports):
            assert ports.grpc_port > 0 and ports.metrics_port == -1 and not srv.draining
            health = health_pb2_grpc.HealthStub(channel)
            for name in ("", SERVICE):
                resp = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert resp.status == health_pb2.HealthCheckResponse.SERVING, name
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await health.Check(health_pb2.HealthCheckRequest(service="omnimesh.v1.Nope"), timeout=5)
            assert info.value.code() is grpc.StatusCode.NOT_FOUND

    run(main())


def test_reflection_lists_every_service() -> None:
    async def main() -> None:
        async with running() as (_, channel, _p):
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            names = []
            async for resp in responses:
                names = [s.name for s in resp.list_services_response.service]
                break
            assert set(names) == {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}

    run(main())


async def health_status(srv: StageServer, service: str) -> int:
    """The health servicer's answer, asked directly: a draining server refuses new calls."""
    resp = await srv.health.Check(health_pb2.HealthCheckRequest(service=service), None)
    return resp.status


def test_graceful_stop_flips_health_and_lets_in_flight_calls_finish() -> None:
    async def main() -> None:
        async with running(drain_grace_s=5.0) as (srv, channel, _):
            slow = asyncio.ensure_future(call(channel, "Unary")(b"slow", timeout=5))
            await asyncio.sleep(0.05)  # the slow call is in flight
            stopping = asyncio.ensure_future(srv.stop())
            await asyncio.sleep(0.02)
            assert srv.draining
            for name in ("", SERVICE):
                assert await health_status(srv, name) == health_pb2.HealthCheckResponse.NOT_SERVING
            assert await slow == b"ok:slow"  # finished within the grace period
            await stopping
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(channel, "Unary")(b"fine", timeout=2)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
            await eventually(lambda: handled(srv, "Unary", "OK") == 1)

    run(main())


@pytest.mark.filterwarnings("ignore:coroutine 'HealthServicer.Watch' was never awaited:RuntimeWarning")
def test_health_watch_sees_serving_then_not_serving() -> None:
    async def main() -> None:
        async with running(drain_grace_s=2.0) as (srv, channel, _):
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=SERVICE))
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
            stopping = asyncio.ensure_future(srv.stop())
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
            await stopping

    run(main())


def test_a_failed_engine_turns_health_not_serving_for_good(caplog: pytest.LogCaptureFixture) -> None:
    failure: list[BaseException] = []

    async def main() -> None:
        srv = StageServer("thinker", "r0", ServerConfig(port=0, metrics_port=-1), Metrics("thinker", "r0"))
        srv.add_service(add_probe, probe_handler(), SERVICE)
        srv.not_serving_when("the test engine", lambda: failure[0] if failure else None, Heartbeat(), 0)
        ports = await srv.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc_port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)

                async def statuses() -> list[int]:
                    return [(await health.Check(health_pb2.HealthCheckRequest(service=n), timeout=5)).status
                            for n in ("", SERVICE)]

                await asyncio.sleep(0.7)  # past a poll or two: nothing has failed, nothing changes
                assert await statuses() == [health_pb2.HealthCheckResponse.SERVING] * 2
                failure.append(RuntimeError("device lost"))
                end = asyncio.get_running_loop().time() + 5
                while await statuses() != [health_pb2.HealthCheckResponse.NOT_SERVING] * 2:
                    assert asyncio.get_running_loop().time() < end, "health never turned NOT_SERVING"
                    await asyncio.sleep(0.1)
                assert srv.metrics.registry.get_sample_value("omnimesh_stage_failures_total",
                                                             {"stage": "thinker", "replica": "r0",
                                                              "model_name": ""}) == 1
        finally:
            await srv.stop(0)

    run(main())
    assert "the test engine has failed (RuntimeError('device lost'))" in caplog.text


def test_serve_until_signal_drains_on_sigterm() -> None:
    async def main() -> None:
        async with running(drain_grace_s=0.5) as (srv, _, _p):
            task = asyncio.ensure_future(srv.serve_until_signal())
            await asyncio.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(task, 5)
            assert srv.draining

    run(main())


def test_metrics_endpoint_serves_the_registry() -> None:
    async def main() -> None:
        async with running(metrics_port=0) as (_, channel, ports):
            assert ports.metrics_port > 0
            await invoke(channel, "Unary", "fine")
            url = f"http://127.0.0.1:{ports.metrics_port}/metrics"
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
            assert 'omnimesh_grpc_server_handled_total{grpc_code="OK",grpc_method="Unary"' in body
            assert 'omnimesh_queue_depth{model_name="",replica="r0",stage="thinker"} 0.0' in body

    run(main())


def test_a_host_that_cannot_be_bound_fails_start() -> None:
    async def main() -> None:
        srv = StageServer("thinker", "r0", ServerConfig(host="256.0.0.1", metrics_port=-1), Metrics("thinker", "r0"))
        with pytest.raises((OSError, RuntimeError), match="256.0.0.1"):
            await srv.start()

    run(main())


def test_a_port_in_use_fails_start() -> None:
    async def main() -> None:
        async with running() as (_, _c, ports):
            other = StageServer("thinker", "r1", ServerConfig(port=ports.grpc_port, metrics_port=-1),
                                Metrics("thinker", "r1"))
            try:
                with pytest.raises((OSError, RuntimeError)):
                    await other.start()
            finally:
                await other.stop(0)

    run(main())


def test_servers_that_share_the_port_both_start() -> None:
    """share_port (gateway replicas under `omnimesh up`): a second server joins the port instead of failing."""
    async def main() -> None:
        first = StageServer("gateway", "g0", ServerConfig(share_port=True, metrics_port=-1), Metrics("gateway", "g0"))
        ports = await first.start()
        second = StageServer("gateway", "g1", ServerConfig(port=ports.grpc_port, share_port=True, metrics_port=-1),
                             Metrics("gateway", "g1"))
        try:
            assert (await second.start()).grpc_port == ports.grpc_port
        finally:
            await second.stop(0)
            await first.stop(0)

    run(main())


def test_server_options_follow_the_config() -> None:
    opts = dict(server_options(ServerConfig(max_message_bytes=4 << 20, keepalive_time_ms=20_000)))
    assert opts["grpc.max_send_message_length"] == opts["grpc.max_receive_message_length"] == 4 << 20
    assert opts["grpc.keepalive_time_ms"] == 20_000 and opts["grpc.http2.max_ping_strikes"] == 0
    assert opts["grpc.so_reuseport"] == 0 and dict(server_options(ServerConfig(share_port=True)))["grpc.so_reuseport"]


def test_announce_ready_prints_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    announce_ready(BoundPorts(50051, 9100))
    out = capsys.readouterr().out
    assert out.startswith(READY_PREFIX) and out.endswith("\n")
    assert json.loads(out[len(READY_PREFIX):]) == {"grpc_port": 50051, "metrics_port": 9100, "health_port": -1}


def test_metrics_families_exist_at_zero_and_take_labels() -> None:
    m = Metrics("thinker", "r3", "demo")
    assert m.registry.get_sample_value("omnimesh_queue_depth",
                                       {"stage": "thinker", "replica": "r3", "model_name": "demo"}) == 0
    g = Metrics("gateway", "r3", "demo")
    g.get("omnimesh_requests_total", outcome="ok", code="OK").inc()
    assert g.registry.get_sample_value("omnimesh_requests_total", {"stage": "gateway", "replica": "r3",
                                       "model_name": "demo", "outcome": "ok", "code": "OK"}) == 1
    with pytest.raises(KeyError):  # a family the stage does not have
        m.get("omnimesh_requests_total", outcome="ok", code="OK")
    with pytest.raises(KeyError):
        m.get("omnimesh_nope")
    with pytest.raises(ValueError):
        g.get("omnimesh_requests_total")  # a labelled family needs its labels
