"""A failed call as an exception: the gRPC status, the fields a bad request got wrong, when to retry."""
from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2, status_pb2

_DETAILS_KEY = "grpc-status-details-bin"  # where a server puts its google.rpc.Status


@dataclass(frozen=True)
class FieldViolation:
    """A bad field of the request, by its path (e.g. `sampling.top_p`, `messages[0].content[1].image`)."""

    field: str
    description: str


class OmnimeshError(Exception):
    """A call that ended in a gRPC status other than OK.

    `code` is the grpc.StatusCode; `field_violations` name what was wrong with an INVALID_ARGUMENT request;
    `retry_after_s` is set when the server says a retry may help (RESOURCE_EXHAUSTED); `stage` names the stage that
    failed (UNAVAILABLE, INTERNAL).
    """

    def __init__(self, code: grpc.StatusCode, message: str, field_violations: tuple[FieldViolation, ...] = (),
                 retry_after_s: float | None = None, stage: str = "") -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.field_violations = field_violations
        self.retry_after_s = retry_after_s
        self.stage = stage


class InvalidArgument(OmnimeshError):
    """The request was wrong; `field_violations` say where."""


class Unauthenticated(OmnimeshError):
    """No API key, or one the deployment does not know."""


class Unimplemented(OmnimeshError):
    """An input or output this deployment does not serve (e.g. speech without a talker stage)."""


class Unavailable(OmnimeshError):
    """The gateway or a stage behind it is down."""


class ResourceExhausted(OmnimeshError):
    """A replica is at its limit; retry after `retry_after_s`."""


class DeadlineExceeded(OmnimeshError):
    """The call's timeout passed."""


_BY_CODE = {grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument, grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
            grpc.StatusCode.UNIMPLEMENTED: Unimplemented, grpc.StatusCode.UNAVAILABLE: Unavailable,
            grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
            grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded}


def from_rpc_error(err: grpc.RpcError) -> OmnimeshError:
    """The exception for a failed call, with the details the server packed into its google.rpc.Status."""
    code, message = err.code(), err.details() or ""
    violations: tuple[FieldViolation, ...] = ()
    retry_after_s, stage = None, ""
    for detail in _status(err).details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations = tuple(FieldViolation(v.field, v.description) for v in bad.field_violations)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after_s = retry.retry_delay.ToTimedelta().total_seconds()
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            stage = info.metadata.get("stage", "")
    return _BY_CODE.get(code, OmnimeshError)(code, message, violations, retry_after_s, stage)


def _status(err: grpc.RpcError) -> status_pb2.Status:
    """The google.rpc.Status in the trailers (sync and aio calls alike); empty when the server sent none."""
    for key, value in err.trailing_metadata() or ():
        if key == _DETAILS_KEY:
            return status_pb2.Status.FromString(value)
    return status_pb2.Status()
