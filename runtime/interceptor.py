"""The one server interceptor: maps domain errors to gRPC statuses with details and counts every RPC."""
from __future__ import annotations

import asyncio
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
                _wrap_stream(handler.stream_stream, track), handler.request_deserializer, handler.response_serializer)
        return grpc.stream_unary_rpc_method_handler(
            _wrap_unary(handler.stream_unary, track), handler.request_deserializer, handler.response_serializer)


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


def _final_code(context: grpc.aio.ServicerContext, default: str) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    return default


def _wrap_unary(behavior: Callable[..., Awaitable[Any]], track: _CallTracker) -> Callable[..., Awaitable[Any]]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        t0 = track.start()
        code = "OK"
        try:
            return await behavior(request, context)
        except OmniError as err:
            code = err.grpc_code_name
            await _abort(context, err)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except Exception:
            code = _final_code(context, "INTERNAL")
            if code == "INTERNAL":
                log.exception("unhandled error in %s", behavior)
            raise
        finally:
            track.done(t0, code)

    return wrapper


def _wrap_stream(behavior: Callable[..., Any], track: _CallTracker) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        t0 = track.start()
        code = "OK"
        try:
            async for response in behavior(request, context):
                yield response
        except OmniError as err:
            code = err.grpc_code_name
            await _abort(context, err)
        except (asyncio.CancelledError, GeneratorExit):
            code = "CANCELLED"
            raise
        except Exception:
            code = _final_code(context, "INTERNAL")
            if code == "INTERNAL":
                log.exception("unhandled error in %s", behavior)
            raise
        finally:
            track.done(t0, code)

    return wrapper
