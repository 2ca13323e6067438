"""The one server interceptor: maps domain errors to gRPC statuses with details and counts every RPC."""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc_status import rpc_status

from runtime.errors import OmniError
from runtime.metrics import Metrics
from runtime.status_mapping import to_rpc_status

log = logging.getLogger(__name__)


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):
    """Every handler raises domain errors; this turns them into statuses and records started/handled/seconds."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        service, _, method = details.method.lstrip("/").rpartition("/")
        track = _CallTracker(self._metrics, service, method)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary, track), handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream, track), handler.request_deserializer, handler.response_serializer)
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                _wrap_stream(handler.stream_stream, track, request_stream=True), handler.request_deserializer,
                handler.response_serializer)
        return grpc.stream_unary_rpc_method_handler(
            _wrap_unary(handler.stream_unary, track, request_stream=True), handler.request_deserializer,
            handler.response_serializer)


class _CallTracker:
    def __init__(self, metrics: Metrics, service: str, method: str) -> None:
        self._m = metrics
        self._labels = {"grpc_service": service, "grpc_method": method}

    def start(self) -> float:
        self._m.get("omnimesh_grpc_server_started_total", **self._labels).inc()
        return time.perf_counter()

    def done(self, t0: float, code: str) -> None:
        self._m.get("omnimesh_grpc_server_handled_total", grpc_code=code, **self._labels).inc()
        self._m.get("omnimesh_grpc_server_handling_seconds", **self._labels).observe(time.perf_counter() - t0)


async def _abort(context: grpc.aio.ServicerContext, err: OmniError) -> None:
    log.info("request failed: %s %s", err.grpc_code_name, err.message)
    await context.abort_with_status(rpc_status.to_status(to_rpc_status(err)))


# A refused request stream is still read before the refusal is sent (see _drain): for as long as its client keeps
# sending, up to REFUSED_STREAM_DRAIN_MAX_S, and no longer than REFUSED_STREAM_DRAIN_S after the last message came.
REFUSED_STREAM_DRAIN_S = 1.0
REFUSED_STREAM_DRAIN_MAX_S = 60.0
BUSY_STREAM_POLL_S = 0.02  # while another task of the handler reads the stream


async def _drain(requests: Any) -> None:
    """Reads and drops what a refused client is still sending. A client whose write meets a stream the server
    already closed gets grpc's own INTERNAL ("Internal error from Core") in place of our status; once it has
    written everything and half-closed, it reads the real status. A gateway relaying a 145 MB video to a busy stage
    writes for seconds: a fixed 1 s cut it off mid-stream (issue 18), so the drain lasts while messages keep coming
    and gives up REFUSED_STREAM_DRAIN_S after the last one (a client that stopped without half-closing), or at
    REFUSED_STREAM_DRAIN_MAX_S in all. Ends at once when the handler had read the stream to its end.

    A handler may leave a task of its own reading the stream (the talker's relay of text): while that task is inside
    the stream's anext() a second anext() raises RuntimeError, and the call used to end UNKNOWN in place of the
    refusal. That task drains for us meanwhile; this polls until it lets go, within the same bounds."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + REFUSED_STREAM_DRAIN_MAX_S
    last = loop.time()  # the last message read, or the start
    iterator = aiter(requests)
    while True:
        left = min(last + REFUSED_STREAM_DRAIN_S, give_up) - loop.time()
        if left <= 0:
            return
        try:
            async with asyncio.timeout(left):
                await anext(iterator)
            last = loop.time()
        except RuntimeError as err:
            if "already running" not in str(err):
                raise
            await asyncio.sleep(BUSY_STREAM_POLL_S)
        except (TimeoutError, grpc.RpcError, asyncio.InvalidStateError, StopAsyncIteration):
            return


async def _handle_failure(exc: BaseException, context: grpc.aio.ServicerContext, behavior: Any,
                          requests: Any = None) -> str:
    """The status code a failed call ends with; aborts for domain errors and hides unexpected ones' details.
    `requests` is a client-streaming call's request iterator, read to its end (bounded) before a refusal."""
    if isinstance(exc, OmniError):
        if requests is not None:
            await _drain(requests)
        await _abort(context, exc)  # raises: the abort ends the call
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"
    code = context.code()
    if isinstance(code, grpc.StatusCode):  # the handler aborted with a status of its own
        return code.name
    log.exception("unhandled error in %s", behavior)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error (see the server log)")
    return "INTERNAL"


def _wrap_unary(behavior: Callable[..., Awaitable[Any]], track: _CallTracker,
                request_stream: bool = False) -> Callable[..., Awaitable[Any]]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        t0 = track.start()
        code = "OK"
        try:
            return await behavior(request, context)
        except BaseException as exc:
            code = _code_of(exc)
            code = await _handle_failure(exc, context, behavior, request if request_stream else None)
            raise
        finally:
            track.done(t0, code)

    return wrapper


def _wrap_stream(behavior: Callable[..., Any], track: _CallTracker, request_stream: bool = False) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        t0 = track.start()
        code = "OK"
        try:
            result = behavior(request, context)
            if inspect.isawaitable(result):  # a handler that sends with context.write() (e.g. Health/Watch)
                await result
            else:
                async for response in result:
                    yield response
        except BaseException as exc:
            code = _code_of(exc)
            code = await _handle_failure(exc, context, behavior, request if request_stream else None)
            raise
        finally:
            track.done(t0, code)

    return wrapper


def _code_of(exc: BaseException) -> str:
    """The code to record if handling the failure itself ends the call (abort raises)."""
    if isinstance(exc, OmniError):
        return exc.grpc_code_name
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return "CANCELLED"
    return "INTERNAL"
