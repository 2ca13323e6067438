"""A bearer token shared by the gateway and the stages (`OMNIMESH_STAGE_TOKEN`): a stage given one refuses every call
without it as UNAUTHENTICATED, and the gateway's channels send it. Health stays open (kubelet probes carry no token).

The token is read from the environment by each process's entry point (a Kubernetes Secret), never at import.
"""
from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from runtime.errors import Unauthenticated

STAGE_TOKEN_ENV = "OMNIMESH_STAGE_TOKEN"
OPEN_SERVICES = ("/grpc.health.v1.Health/",)
_HEADER = "authorization"


def has_token(metadata: Any, token: str) -> bool:
    sent = next((v for k, v in metadata or () if k.lower() == _HEADER), None)
    if isinstance(sent, bytes):
        sent = sent.decode("latin-1")
    return sent is not None and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


class StageTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without the stage token. Placed inside the error-mapping interceptor, so the refusal is a domain
    error that is mapped and counted like any other."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(OPEN_SERVICES):
            return handler
        if has_token(details.invocation_metadata, self._token):
            return handler
        refusal = Unauthenticated(f"{details.method} needs the stage token (`authorization: Bearer <token>`, the "
                                  f"{STAGE_TOKEN_ENV} the gateway was given); this stage serves the gateway only")
        return _refusing(handler, refusal)


def _refusing(handler: grpc.RpcMethodHandler, refusal: Unauthenticated) -> grpc.RpcMethodHandler:
    """A handler of the same kind that raises `refusal` without reading the request stream."""

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise refusal

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise refusal
        yield  # an async generator, as streaming handlers are

    kinds = ((handler.unary_unary, grpc.unary_unary_rpc_method_handler, unary),
             (handler.unary_stream, grpc.unary_stream_rpc_method_handler, stream),
             (handler.stream_stream, grpc.stream_stream_rpc_method_handler, stream),
             (handler.stream_unary, grpc.stream_unary_rpc_method_handler, unary))
    for behavior, make, refuse in kinds:
        if behavior is not None:
            return make(refuse, handler.request_deserializer, handler.response_serializer)
    return handler


class _TokenMetadata:
    def __init__(self, token: str) -> None:
        self._pair = (_HEADER, f"Bearer {token}")

    def _with_token(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return details._replace(metadata=grpc.aio.Metadata(*(details.metadata or ()), self._pair))


# One class per call kind: a channel files each interceptor under the first kind it is an instance of.
class _UnaryUnary(_TokenMetadata, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):  # noqa: ANN001 - grpc's signature
        return await continuation(self._with_token(details), request)


class _UnaryStream(_TokenMetadata, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):  # noqa: ANN001
        return await continuation(self._with_token(details), request)


class _StreamUnary(_TokenMetadata, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, request_iterator):  # noqa: ANN001
        return await continuation(self._with_token(details), request_iterator)


class _StreamStream(_TokenMetadata, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):  # noqa: ANN001
        return await continuation(self._with_token(details), request_iterator)


def token_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    """Client interceptors that send `token` (none when it is empty)."""
    return [kind(token) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)] if token else []
