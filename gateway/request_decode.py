"""Request bytes -> protobuf for the public service. Bytes that do not parse, or are more than the gateway accepts,
become an `Undecodable` the servicer refuses after the API-key check: grpc itself would end the call UNKNOWN (or
its own RESOURCE_EXHAUSTED), before any handler, auth or metric saw it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message

from omnimesh.v1 import common_pb2, omni_pb2
from runtime.errors import InvalidArgument, OmniError, ResourceExhausted

SERVICE_NAME = "omnimesh.v1.Omni"
# The gateway's grpc reads a request up to twice this limit (runtime/stage_main.py), so one over it gets the error
# below, naming the field; past twice the limit grpc refuses the bytes itself ("Received message larger than max").
MAX_REQUEST_BYTES_FIELD = "gateway.server.max_message_bytes"


@dataclass(frozen=True)
class Undecodable:
    """A request that never became a message: `error()` is what the call ends with."""

    message_type: str
    num_bytes: int
    max_bytes: int
    problem: str = ""  # the parser's reason; empty when the request is over the size limit

    def error(self) -> OmniError:
        if not self.problem:
            return ResourceExhausted(
                f"the request is {self.num_bytes} bytes; this gateway accepts at most {self.max_bytes} "
                f"({MAX_REQUEST_BYTES_FIELD}). Send fewer or smaller media items per request (downscale images, "
                f"shorten clips), or raise {MAX_REQUEST_BYTES_FIELD} in the mesh config", retry_after_s=None)
        return InvalidArgument("request", f"the {self.num_bytes} bytes sent are not a valid {self.message_type} "
                               f"({self.problem}); serialize the request with protobuf from omnimesh/v1/omni.proto")


def refuse_undecodable(request: object) -> None:
    if isinstance(request, Undecodable):
        raise request.error()


def lenient_parser(message_type: type[Message], max_bytes: int) -> Callable[[bytes], Any]:
    name = message_type.DESCRIPTOR.full_name

    def parse(data: bytes) -> Message | Undecodable:
        if len(data) > max_bytes:
            return Undecodable(name, len(data), max_bytes)
        try:
            return message_type.FromString(data)
        except Exception as err:  # noqa: BLE001 - whatever the parser refuses, the bytes are at fault
            reason = str(err).rpartition(": ")[2] or type(err).__name__  # "Wire format was corrupt", not the type
            return Undecodable(name, len(data), max_bytes, reason[:100])

    return parse


def add_omni_servicer(servicer: Any, server: grpc.aio.Server, max_request_bytes: int) -> None:
    """`omni_pb2_grpc.add_OmniServicer_to_server` with lenient request parsers."""
    handlers = {
        "Chat": grpc.unary_stream_rpc_method_handler(
            servicer.Chat, request_deserializer=lenient_parser(omni_pb2.ChatRequest, max_request_bytes),
            response_serializer=omni_pb2.ChatEvent.SerializeToString),
        "Transcribe": grpc.unary_stream_rpc_method_handler(
            servicer.Transcribe, request_deserializer=lenient_parser(omni_pb2.TranscribeRequest, max_request_bytes),
            response_serializer=omni_pb2.TranscribeEvent.SerializeToString),
        "TranscribeStream": grpc.stream_stream_rpc_method_handler(
            servicer.TranscribeStream,
            request_deserializer=lenient_parser(omni_pb2.TranscribeChunk, max_request_bytes),
            response_serializer=omni_pb2.TranscribeEvent.SerializeToString),
        "Info": grpc.unary_unary_rpc_method_handler(
            servicer.Info, request_deserializer=lenient_parser(common_pb2.InfoRequest, max_request_bytes),
            response_serializer=omni_pb2.OmniInfo.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
