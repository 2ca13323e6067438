"""A failed call's google.rpc.Status as the client's exception: subclass per code, field violations, retry delay,
failed stage; a status without details still names its code."""
from __future__ import annotations

import datetime

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

import omnimesh
from omnimesh.errors import from_rpc_error


class FailedCall(grpc.RpcError):
    """What grpc raises for a failed call: code, details and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str, status: status_pb2.Status | None = None) -> None:
        self._code, self._details = code, details
        self._trailers = (("grpc-status-details-bin", status.SerializeToString()),) if status else ()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailers


def test_invalid_argument_carries_its_field_violations() -> None:
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="sampling.top_p: bad")
    status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field="sampling.top_p", description="bad")]))
    err = from_rpc_error(FailedCall(grpc.StatusCode.INVALID_ARGUMENT, "sampling.top_p: bad", status))
    assert isinstance(err, omnimesh.InvalidArgument) and err.code is grpc.StatusCode.INVALID_ARGUMENT
    assert err.field_violations == (omnimesh.FieldViolation("sampling.top_p", "bad"),)
    assert str(err) == "INVALID_ARGUMENT: sampling.top_p: bad"


def test_resource_exhausted_says_when_to_retry_and_unavailable_which_stage() -> None:
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="full")
    delay = duration_pb2.Duration()
    delay.FromTimedelta(datetime.timedelta(milliseconds=1500))
    status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    err = from_rpc_error(FailedCall(grpc.StatusCode.RESOURCE_EXHAUSTED, "full", status))
    assert isinstance(err, omnimesh.ResourceExhausted) and err.retry_after_s == 1.5

    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="talker down")
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason="UNAVAILABLE", domain="omnimesh",
                                                          metadata={"stage": "talker"}))
    err = from_rpc_error(FailedCall(grpc.StatusCode.UNAVAILABLE, "talker down", status))
    assert isinstance(err, omnimesh.Unavailable) and err.stage == "talker" and err.retry_after_s is None


def test_a_code_without_a_subclass_or_details_is_the_base_error() -> None:
    err = from_rpc_error(FailedCall(grpc.StatusCode.INTERNAL, "boom"))
    assert type(err) is omnimesh.OmnimeshError and err.code is grpc.StatusCode.INTERNAL
    assert err.field_violations == () and err.stage == "" and err.message == "boom"
