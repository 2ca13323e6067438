"""What integration tests read off a failed call: the google.rpc BadRequest and the INVALID_ARGUMENT contract."""
from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


def field_violations(err: grpc.aio.AioRpcError) -> list[error_details_pb2.BadRequest.FieldViolation]:
    """The BadRequest field violations a failed call carries; fails the test when it carries none."""
    status = rpc_status.from_call(err)
    assert status is not None, f"no rich status on {err.code()}: {err.details()}"
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            return list(bad.field_violations)
    raise AssertionError(f"no BadRequest detail in {status}")


def violated_fields(err: grpc.aio.AioRpcError) -> list[str]:
    return [v.field for v in field_violations(err)]


def assert_invalid_argument(err: grpc.aio.AioRpcError, field: str, words: Iterable[str] = ()) -> None:
    """INVALID_ARGUMENT whose message starts with the field, mentions every word, and names only that field."""
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert err.details().startswith(f"{field}: "), err.details()
    for word in words:
        assert word in err.details(), err.details()
    assert violated_fields(err) == [field]
