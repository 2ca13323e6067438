"""Domain errors -> google.rpc.Status: code, message and the details each kind carries."""
from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2

from runtime.errors import (
    Cancelled,
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    OmniError,
    ResourceExhausted,
    StageFault,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from runtime.status_mapping import ERROR_DOMAIN, grpc_code, to_rpc_status


def unpack(detail: any_pb2.Any, cls: type) -> object:
    msg = cls()
    assert detail.Unpack(msg), f"{detail.type_url} is not {cls.__name__}"
    return msg


@pytest.mark.parametrize(("err", "code"), [
    (OmniError("boom"), grpc.StatusCode.INTERNAL),
    (InvalidArgument("f", "bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (Unimplemented("no"), grpc.StatusCode.UNIMPLEMENTED),
    (Unavailable("down"), grpc.StatusCode.UNAVAILABLE),
    (ResourceExhausted("full"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unauthenticated("who"), grpc.StatusCode.UNAUTHENTICATED),
    (DeadlineExceeded("late"), grpc.StatusCode.DEADLINE_EXCEEDED),
    (Cancelled("gone"), grpc.StatusCode.CANCELLED),
    (StageFault("cut short", "vision"), grpc.StatusCode.INTERNAL),
])
def test_codes(err: OmniError, code: grpc.StatusCode) -> None:
    assert grpc_code(err) is code
    status = to_rpc_status(err)
    assert status.code == code.value[0] == getattr(code_pb2, code.name)
    assert status.message == err.message
    info = unpack(status.details[-1] if not isinstance(err, ResourceExhausted) else status.details[-2],
                  error_details_pb2.ErrorInfo)
    assert info.reason == code.name and info.domain == ERROR_DOMAIN


def test_invalid_argument_carries_bad_request_field_violations() -> None:
    status = to_rpc_status(InvalidArgument("messages[0].role", "is 'bot'; must be one of system, user, assistant"))
    assert status.message == "messages[0].role: is 'bot'; must be one of system, user, assistant"
    assert len(status.details) == 2
    bad = unpack(status.details[0], error_details_pb2.BadRequest)
    assert [(v.field, v.description) for v in bad.field_violations] == [
        ("messages[0].role", "is 'bot'; must be one of system, user, assistant")]


def test_invalid_argument_with_several_violations() -> None:
    err = InvalidArgument("messages", "2 problems",
                          [FieldViolation("messages[0].role", "bad"), FieldViolation("messages[1].content", "empty")])
    bad = unpack(to_rpc_status(err).details[0], error_details_pb2.BadRequest)
    assert [v.field for v in bad.field_violations] == ["messages[0].role", "messages[1].content"]


def test_unavailable_names_the_stage() -> None:
    status = to_rpc_status(Unavailable("thinker is down", stage="thinker"))
    assert len(status.details) == 1
    assert unpack(status.details[0], error_details_pb2.ErrorInfo).metadata["stage"] == "thinker"
    info = unpack(to_rpc_status(Unavailable("x")).details[0], error_details_pb2.ErrorInfo)
    assert "stage" not in info.metadata


def test_a_stage_fault_names_the_stage() -> None:
    status = to_rpc_status(StageFault("vision stage did not return 'item.1.merged'", "vision"))
    assert status.code == code_pb2.INTERNAL
    assert unpack(status.details[0], error_details_pb2.ErrorInfo).metadata["stage"] == "vision"


def test_resource_exhausted_carries_retry_info() -> None:
    status = to_rpc_status(ResourceExhausted("queue full", retry_after_s=2.5))
    assert len(status.details) == 2
    retry = unpack(status.details[1], error_details_pb2.RetryInfo)
    assert retry.retry_delay.ToTimedelta().total_seconds() == 2.5
    default = unpack(to_rpc_status(ResourceExhausted("x")).details[1], error_details_pb2.RetryInfo)
    assert default.retry_delay.seconds == 1


def test_resource_exhausted_without_a_retry_delay_carries_no_retry_info() -> None:
    status = to_rpc_status(ResourceExhausted("the request is too large", retry_after_s=None))
    assert [d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status.details] == [False]
