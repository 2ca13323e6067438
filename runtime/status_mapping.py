"""Domain errors -> google.rpc.Status with details (BadRequest, ErrorInfo, RetryInfo)."""
from __future__ import annotations

import datetime

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from runtime.errors import InvalidArgument, OmniError, ResourceExhausted, StageFault, Unavailable

ERROR_DOMAIN = "omnimesh"


def to_rpc_status(err: OmniError) -> status_pb2.Status:
    code = getattr(code_pb2, err.grpc_code_name)
    status = status_pb2.Status(code=code, message=err.message)
    if isinstance(err, InvalidArgument):
        bad = error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in err.violations])
        status.details.add().Pack(bad)
    info = error_details_pb2.ErrorInfo(reason=err.grpc_code_name, domain=ERROR_DOMAIN)
    if isinstance(err, (Unavailable, StageFault)) and err.stage:
        info.metadata["stage"] = err.stage
    status.details.add().Pack(info)
    if isinstance(err, ResourceExhausted) and err.retry_after_s is not None:
        delay = duration_pb2.Duration()
        delay.FromTimedelta(datetime.timedelta(seconds=err.retry_after_s))
        status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


def grpc_code(err: OmniError) -> grpc.StatusCode:
    return grpc.StatusCode[err.grpc_code_name]
