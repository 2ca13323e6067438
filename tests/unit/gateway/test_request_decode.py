"""lenient_parser: request bytes that do not parse, or are too many, become an Undecodable naming why."""
from __future__ import annotations

import pytest

from omnimesh.v1 import omni_pb2
from runtime.errors import InvalidArgument, ResourceExhausted
from gateway.request_decode import Undecodable, lenient_parser, refuse_undecodable

parse = lenient_parser(omni_pb2.ChatRequest, 1000)


def test_a_valid_request_parses() -> None:
    req = omni_pb2.ChatRequest(request_id="r", voice="ethan")
    assert parse(req.SerializeToString()) == req
    refuse_undecodable(req)  # a message passes


@pytest.mark.parametrize(("data", "reason"), [
    (b"\xff\xff\xff", "Wire format was corrupt"),
    (b"\x0a\x03\xc3\x28\xff", "String field had bad UTF-8"),
    (b"\x12\x7f\x0a", "Wire format was corrupt"),
])
def test_bytes_that_do_not_parse_are_invalid_argument(data: bytes, reason: str) -> None:
    out = parse(data)
    assert out == Undecodable("omnimesh.v1.ChatRequest", len(data), 1000, reason)
    with pytest.raises(InvalidArgument) as info:
        refuse_undecodable(out)
    assert info.value.violations[0].field == "request"
    assert info.value.message == (f"request: the {len(data)} bytes sent are not a valid omnimesh.v1.ChatRequest "
                                  f"({reason}); serialize the request with protobuf from omnimesh/v1/omni.proto")


def test_a_request_over_the_limit_names_the_field_and_gets_no_retry_info() -> None:
    with pytest.raises(ResourceExhausted) as info:
        refuse_undecodable(parse(b"\x0a\x01x" * 400))
    assert info.value.retry_after_s is None
    assert "the request is 1200 bytes; this gateway accepts at most 1000 (gateway.server.max_message_bytes)" in (
        info.value.message)
