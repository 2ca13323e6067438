"""gRPC edge of the thinker: converts protobuf and calls ThinkerService."""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc
from runtime.config import SamplingDefaults
from runtime.logs import request_id_var
from services.thinker.cache_report import CacheReporter, report_interval_s
from services.thinker.model import ThinkerConfig
from services.thinker.service import ThinkerService
from services.thinker.wire import cache_event_to_pb, read_generate_input, to_pb


class ThinkerServicer(thinker_pb2_grpc.ThinkerServicer):
    def __init__(self, service: ThinkerService, cfg: ThinkerConfig, defaults: SamplingDefaults,
                 info: common_pb2.StageInfo, cache: CacheReporter) -> None:
        self._service = service
        self._cache = cache
        self._cfg = cfg
        self._defaults = defaults
        self._info = info

    async def Generate(self, request_iterator: AsyncIterator[thinker_pb2.GenerateRequest],
                       context: grpc.aio.ServicerContext) -> AsyncIterator[thinker_pb2.GenerateResponse]:
        inp = await read_generate_input(request_iterator, self._cfg, self._defaults, self._service.max_model_len)
        request_id_var.set(inp.request_id or "-")
        async for out in self._service.generate(inp):
            for msg in to_pb(out, self._service.tokenizer.token_bytes):
                yield msg

    async def Info(self, request: common_pb2.InfoRequest, context: grpc.aio.ServicerContext) -> common_pb2.StageInfo:
        return self._info

    async def CacheEvents(self, request: thinker_pb2.CacheEventsRequest, context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[thinker_pb2.CacheEvent]:
        async for report in self._cache.reports(report_interval_s(request.interval_ms)):
            yield cache_event_to_pb(report)
