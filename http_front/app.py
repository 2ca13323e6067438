"""The ASGI app: OpenAI routes over AsyncClients to the gateway (one a connection), every error in the OpenAI
shape."""
from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from omnimesh import AsyncClient, OmnimeshError, Reply
from runtime.channels import open_channel
from runtime.logs import request_id_var
from http_front import audio, realtime, transcriptions
from http_front.chat_input import chat_call
from http_front.chat_output import Completion, completion_json, sse_stream
from http_front.disconnect import CLIENT_CLOSED_REQUEST, ClientGone, unless_client_leaves
from http_front.errors import RequestError, error_body, grpc_error_response, request_error_response
from http_front.gateway import api_key, client, model_name, served_model_name
from http_front.schemas import ChatCompletionRequest
from http_front.server_timing import server_timing
from http_front.sse import collect


def create_app(gateway_addr: str, model_id: str = "", timeout_s: float | None = None,
               gateway_credentials: grpc.ChannelCredentials | None = None, connections: int = 1) -> FastAPI:
    """`model_id`: the id /v1/models lists and answers carry (default: the checkpoint's directory name).
    `gateway_credentials`: dial the gateway over TLS with these (None: plaintext). `connections`: to the gateway,
    taken in turn by the calls (http_front.gateway.client)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        clients = [AsyncClient(gateway_addr, timeout=timeout_s, channel=open_channel(
            gateway_addr, credentials=gateway_credentials, own_connection=connections > 1))
            for _ in range(connections)]  # made here: in the server's event loop
        app.state.clients = itertools.cycle(clients)
        yield
        for c in clients:
            await c.close()

    app = FastAPI(title="omnimesh", lifespan=lifespan)
    app.state.model_name = model_id
    app.state.mesh_info = None  # the gateway's Info, once asked (http_front.gateway.mesh_info)
    app.state.started = int(time.time())
    app.include_router(audio.router)
    app.include_router(transcriptions.router)
    app.include_router(realtime.router)
    _add_error_handlers(app)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        return {"object": "list", "data": [await _model_card(request)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request) -> dict:
        card = await _model_card(request)
        if model_id != card["id"]:
            raise RequestError(f"model {model_id!r} is not served here; this server serves {card['id']!r}", "model",
                               status=404, code="model_not_found")
        return card

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        request_id = uuid.uuid4().hex  # also the gateway's request id: one id in every process's log lines
        request_id_var.set(request_id)
        call = chat_call(body, request_id)
        c = Completion(f"chatcmpl-{request_id}", int(time.time()), await model_name(request, body.model),
                       call.kwargs["speak"], body.audio.format if body.audio else "", body.logprobs,
                       bool(body.stream_options and body.stream_options.include_usage))
        events = client(request).chat_stream(call.messages, api_key=api_key(request), **call.kwargs)
        headers = {"x-request-id": request_id}
        if not body.stream:
            reply = await unless_client_leaves(request, collect(Reply(), events))
            return JSONResponse(completion_json(c, reply), headers=headers | server_timing(reply.timing))
        # a request the gateway refuses is an HTTP error, not a failing stream
        first = await unless_client_leaves(request, anext(events, None))
        return StreamingResponse(sse_stream(c, first, events), media_type="text/event-stream", headers=headers)

    return app


async def _model_card(request: Request) -> dict:
    """Asks the gateway each time, so its API key check applies here too."""
    name = served_model_name(request.app.state, await client(request).info(api_key=api_key(request)))
    return {"id": name, "object": "model", "created": request.app.state.started, "owned_by": "omnimesh"}


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OmnimeshError)
    async def on_grpc_error(request: Request, err: OmnimeshError) -> JSONResponse:
        return grpc_error_response(err)

    @app.exception_handler(ClientGone)
    async def on_client_gone(request: Request, err: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(RequestError)
    async def on_request_error(request: Request, err: RequestError) -> JSONResponse:
        return request_error_response(err)

    @app.exception_handler(RequestValidationError)
    async def on_invalid_body(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or None
        message = f"{param}: {first.get('msg', 'invalid')}" if param else first.get("msg", "invalid request body")
        return JSONResponse(error_body(message, "invalid_request_error", param, "invalid_value"), status_code=400)

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, err: HTTPException) -> JSONResponse:
        type_ = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(err.detail), type_), status_code=err.status_code)
