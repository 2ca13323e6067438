"""gRPC edge of the vision stage: converts protobuf and calls VisionService."""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from omnimesh.v1 import common_pb2, vision_pb2, vision_pb2_grpc
from runtime.logs import request_id_var
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
