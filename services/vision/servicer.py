"""gRPC edge of the vision stage: converts protobuf and calls VisionService."""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from omnimesh.v1 import common_pb2, vision_pb2, vision_pb2_grpc
from runtime.logs import request_id_var
from runtime.tensor_wire import keep_serialized
from services.vision.service import VisionService
from services.vision.wire import read_items, read_start, to_pb


class VisionServicer(vision_pb2_grpc.VisionServicer):
    def __init__(self, service: VisionService, info: common_pb2.StageInfo) -> None:
        self._service = service
        self._info = info

    async def Encode(self, request_iterator: AsyncIterator[vision_pb2.VisionRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[vision_pb2.VisionResponse]:
        head = await read_start(request_iterator, self._service.processing, self._service.max_request_patches)
        request_id_var.set(head.request_id or "-")
        # Admitted (or queued for its turn) before the frames are read: they are most of the bytes, and a waiting
        # request's frames stay with the gateway, held back by flow control.
        async with self._service.pending.queued(head.num_patches):
            inp = await read_items(request_iterator, head)
            async for out in self._service.encode(inp):
                for msg in to_pb(out):
                    yield msg

    async def Info(self, request: common_pb2.InfoRequest, context: grpc.aio.ServicerContext) -> common_pb2.StageInfo:
        return self._info


def add_to_server(servicer: VisionServicer, server: grpc.aio.Server) -> None:
    """The generated `add_VisionServicer_to_server`, but Encode's responses may be bytes serialized already (the
    embeddings chunks of `to_pb`)."""
    handlers = {
        "Encode": grpc.stream_stream_rpc_method_handler(
            servicer.Encode, request_deserializer=vision_pb2.VisionRequest.FromString,
            response_serializer=keep_serialized(vision_pb2.VisionResponse.SerializeToString)),
        "Info": grpc.unary_unary_rpc_method_handler(
            servicer.Info, request_deserializer=common_pb2.InfoRequest.FromString,
            response_serializer=common_pb2.StageInfo.SerializeToString),
    }
    name = vision_pb2.DESCRIPTOR.services_by_name["Vision"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)
