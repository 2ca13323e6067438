"""gRPC errors as OpenAI error bodies: the HTTP status per code, the OpenAI name of the bad field, Retry-After."""
from __future__ import annotations

import json

import grpc
import pytest

from omnimesh import FieldViolation, OmnimeshError
from http_front.errors import grpc_error_body, grpc_error_response


@pytest.mark.parametrize("code, status, type_", [
    (grpc.StatusCode.INVALID_ARGUMENT, 400, "invalid_request_error"),
    (grpc.StatusCode.UNIMPLEMENTED, 400, "invalid_request_error"),
    (grpc.StatusCode.UNAUTHENTICATED, 401, "authentication_error"),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, 429, "rate_limit_error"),
    (grpc.StatusCode.UNAVAILABLE, 503, "service_unavailable"),
    (grpc.StatusCode.DEADLINE_EXCEEDED, 504, "timeout"),
    (grpc.StatusCode.INTERNAL, 500, "internal_error"),
    (grpc.StatusCode.DATA_LOSS, 500, "internal_error"),
])
def test_status_per_code(code: grpc.StatusCode, status: int, type_: str) -> None:
    got, body = grpc_error_body(OmnimeshError(code, "what went wrong"))
    assert got == status
    assert body == {"error": {"message": "what went wrong", "type": type_, "param": None, "code": code.name.lower()}}


@pytest.mark.parametrize("field, param", [("sampling.top_p", "top_p"), ("messages[0].role", "messages[0].role"),
                                          ("output_modalities", "modalities"), ("voice", "audio.voice")])
def test_the_bad_field_by_its_openai_name(field: str, param: str) -> None:
    err = OmnimeshError(grpc.StatusCode.INVALID_ARGUMENT, "bad", (FieldViolation(field, "bad"),))
    assert grpc_error_body(err)[1]["error"]["param"] == param


def test_resource_exhausted_says_when_to_retry() -> None:
    response = grpc_error_response(OmnimeshError(grpc.StatusCode.RESOURCE_EXHAUSTED, "full", retry_after_s=0.3))
    assert response.status_code == 429 and response.headers["retry-after"] == "1"
    assert json.loads(response.body)["error"]["type"] == "rate_limit_error"
