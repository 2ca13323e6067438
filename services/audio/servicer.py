"""gRPC edge of the audio stage: converts protobuf and calls AudioService."""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from omnimesh.v1 import audio_pb2, audio_pb2_grpc, common_pb2
from runtime.logs import request_id_var
from services.audio.service import AudioService
from services.audio.wire import read_clips, read_start, to_pb


class AudioServicer(audio_pb2_grpc.AudioServicer):
    def __init__(self, service: AudioService, info: common_pb2.StageInfo) -> None:
        self._service = service
        self._info = info

    async def Encode(self, request_iterator: AsyncIterator[audio_pb2.AudioRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[audio_pb2.AudioResponse]:
        head = await read_start(request_iterator, self._service.limits)
        request_id_var.set(head.request_id or "-")
        # admitted (or queued for its turn) before the samples are read: they are most of the bytes
        async with self._service.pending.queued(head.frames):
            inp = await read_clips(request_iterator, head)
            async for out in self._service.encode(inp):
                for msg in to_pb(out):
                    yield msg

    async def Info(self, request: common_pb2.InfoRequest, context: grpc.aio.ServicerContext) -> common_pb2.StageInfo:
        return self._info
