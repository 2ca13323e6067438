"""Errors in the OpenAI shape (`{"error": {message, type, param, code}}`), with gRPC status codes mapped to HTTP."""
from __future__ import annotations

from typing import NamedTuple

import grpc
from fastapi.responses import JSONResponse

from omnimesh import OmnimeshError


class HttpStatus(NamedTuple):
    status: int
    type: str  # OpenAI's error type


# UNIMPLEMENTED is a request this deployment cannot serve (e.g. audio out without a talker): 400, as a 5xx would be
# retried by the OpenAI SDK to the same answer.
GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: HttpStatus(400, "invalid_request_error"),
    grpc.StatusCode.UNIMPLEMENTED: HttpStatus(400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: HttpStatus(400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: HttpStatus(400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: HttpStatus(401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: HttpStatus(403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: HttpStatus(404, "not_found_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: HttpStatus(429, "rate_limit_error"),
    grpc.StatusCode.CANCELLED: HttpStatus(499, "cancelled"),
    grpc.StatusCode.UNAVAILABLE: HttpStatus(503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: HttpStatus(504, "timeout"),
}
INTERNAL = HttpStatus(500, "internal_error")


class RequestError(Exception):
    """A request the front itself rejects before it reaches the gateway (400 unless said otherwise)."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# Fields of omnimesh.v1.ChatRequest and TranscribeRequest by their names in an OpenAI request.
_PARAMS = {"output_modalities": "modalities", "voice": "audio.voice", "context": "prompt", "audio": "file",
           "audio.data": "file"}


def openai_param(field: str) -> str:
    """A gateway's field path (`sampling.top_p`, `messages[0].role`) as the OpenAI request names it (`top_p`)."""
    field = field.removeprefix("sampling.")
    return _PARAMS.get(field, field)


def grpc_error_body(err: OmnimeshError) -> tuple[int, dict]:
    """The HTTP status and body of a failed gRPC call; `param` is the first field the gateway named."""
    status = GRPC_TO_HTTP.get(err.code, INTERNAL)
    param = openai_param(err.field_violations[0].field) if err.field_violations else None
    return status.status, error_body(err.message, status.type, param, err.code.name.lower())


def grpc_error_response(err: OmnimeshError) -> JSONResponse:
    status, body = grpc_error_body(err)
    headers = {"retry-after": f"{max(1, round(err.retry_after_s))}"} if err.retry_after_s is not None else None
    return JSONResponse(body, status_code=status, headers=headers)


def request_error_response(err: RequestError) -> JSONResponse:
    return JSONResponse(error_body(err.message, "invalid_request_error" if err.status < 500 else "internal_error",
                                   err.param, err.code), status_code=err.status)
