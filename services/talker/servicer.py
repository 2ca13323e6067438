"""gRPC edge of the talker: converts protobuf and calls TalkerService."""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from omnimesh.v1 import common_pb2, talker_pb2, talker_pb2_grpc
from runtime.logs import request_id_var
from services.talker.service import TalkerService
from services.talker.wire import SpeakLimits, SpeakReader, to_pb


class TalkerServicer(talker_pb2_grpc.TalkerServicer):
    def __init__(self, service: TalkerService, limits: SpeakLimits, info: common_pb2.StageInfo) -> None:
        self._service = service
        self._limits = limits
        self._groups = limits.prompt.cfg.num_code_groups
        self._info = info

    async def Speak(self, request_iterator: AsyncIterator[talker_pb2.SpeakRequest],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[talker_pb2.SpeakResponse]:
        reader = SpeakReader(request_iterator, self._limits)
        inp = await reader.read_setup()
        request_id_var.set(inp.request_id or "-")
        async for out in self._service.speak(inp, reader.text()):
            yield to_pb(out, self._groups)

    async def Info(self, request: common_pb2.InfoRequest, context: grpc.aio.ServicerContext) -> common_pb2.StageInfo:
        return self._info
