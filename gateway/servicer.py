"""gRPC edge of the gateway: the public Omni service."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import grpc
from google.protobuf.message import Message

from omnimesh.timing import TIMING_TRAILER
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from runtime.config import GatewayConfig
from runtime.errors import OmniError, ResourceExhausted
from runtime.logs import request_id_var
from gateway.auth import check_api_key, holds_key
from gateway.chat_input import chat_input_from_pb
from gateway.request_decode import refuse_undecodable
from gateway.service import ChatEventOut, OmniService, ReasoningEvent, TextEvent, UsageEvent
from gateway.speech import AudioEvent, ErrorEvent
from gateway.transcribe import LanguageEvent, TranscribeEventOut, TranscribeService, TranscriptEvent
from gateway.transcribe import transcribe_input_from_pb
from gateway.timeline import current_timeline, open_timeline
from gateway.transcribe_stream import PartialEvent, PcmBuffer, stream_settings_from_pb, transcribe_stream

log = logging.getLogger(__name__)


class OmniServicer(omni_pb2_grpc.OmniServicer):
    def __init__(self, service: OmniService, cfg: GatewayConfig, info: omni_pb2.OmniInfo,
                 transcriber: TranscribeService | None = None) -> None:
        self._service = service
        self._transcriber = transcriber or TranscribeService(service, family="")
        self._cfg = cfg
        self._info = info
        self._in_flight = 0  # Chat streams open now; one event loop serves them, so a plain count does
        self._keys = cfg.api_keys + cfg.special_token_api_keys  # every key that authenticates

    async def Chat(self, request: omni_pb2.ChatRequest,
                   context: grpc.aio.ServicerContext) -> AsyncIterator[omni_pb2.ChatEvent]:
        async for event in self._served(request, context, self._chat_events):
            yield event

    async def Transcribe(self, request: omni_pb2.TranscribeRequest,
                         context: grpc.aio.ServicerContext) -> AsyncIterator[omni_pb2.TranscribeEvent]:
        async for event in self._served(request, context, self._transcribe_events):
            yield event

    async def TranscribeStream(self, chunks: AsyncIterator[omni_pb2.TranscribeChunk],
                               context: grpc.aio.ServicerContext) -> AsyncIterator[omni_pb2.TranscribeEvent]:
        chunks = aiter(chunks)
        first = await anext(chunks, None) or omni_pb2.TranscribeChunk()  # none at all: refused for its missing config
        rest = _decodable(chunks)  # the first is refused in _served, after the key check, as a unary request is

        async def events(first: omni_pb2.TranscribeChunk,
                         context: grpc.aio.ServicerContext) -> AsyncIterator[omni_pb2.TranscribeEvent]:
            settings = stream_settings_from_pb(first, self._cfg.sampling)
            request_id_var.set(settings.job.chat.request_id)
            self._transcriber.check_family()
            audio = PcmBuffer(settings.sample_rate, self._cfg.max_audio_seconds)
            audio.add(first, 0)
            seq = 0
            async for ev in transcribe_stream(self._transcriber, settings, audio, rest, context.time_remaining):
                yield _transcribe_to_pb(seq, ev)
                seq += 1

        async for event in self._served(first, context, events):
            yield event

    async def _chat_events(self, request: omni_pb2.ChatRequest,
                           context: grpc.aio.ServicerContext) -> AsyncIterator[omni_pb2.ChatEvent]:
        chat = chat_input_from_pb(request, self._cfg.sampling)
        if holds_key(context.invocation_metadata() or (), self._cfg.special_token_api_keys):
            chat = replace(chat, special_tokens=True)
        request_id_var.set(chat.request_id)
        seq = 0
        async for ev in self._service.chat(chat, timeout=context.time_remaining()):
            yield _to_pb(seq, ev)
            seq += 1

    async def _transcribe_events(self, request: omni_pb2.TranscribeRequest,
                                 context: grpc.aio.ServicerContext) -> AsyncIterator[omni_pb2.TranscribeEvent]:
        job = transcribe_input_from_pb(request, self._cfg.sampling)
        request_id_var.set(job.chat.request_id)
        seq = 0
        async for ev in self._transcriber.transcribe(job, timeout=context.time_remaining()):
            yield _transcribe_to_pb(seq, ev)
            seq += 1

    async def _served(self, request: Any, context: grpc.aio.ServicerContext,
                      events: Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Message]]
                      ) -> AsyncIterator[Message]:
        """Key check, the in-flight limit, the request metrics and the call's timeline (gateway/timeline.py: the
        `omnimesh-timing` trailer of an answered call, the slow-request log) around one streaming call."""
        m = self._service.metrics
        t0 = time.monotonic()
        open_timeline(t0)
        code = "OK"
        finish = "stop"
        m.get("omnimesh_requests_in_flight").inc()
        self._in_flight += 1
        try:
            check_api_key(context.invocation_metadata() or (), self._keys)
            refuse_undecodable(request)
            if self._in_flight > self._cfg.max_in_flight:
                raise ResourceExhausted(f"this gateway holds {self._in_flight - 1} chat streams, its limit "
                                        f"gateway.max_in_flight={self._cfg.max_in_flight}; retry shortly, or add "
                                        "gateway replicas")
            async for event in events(request, context):
                finish = _finish_reason(event, finish)
                yield event
        except OmniError as err:
            code = err.grpc_code_name
            raise
        except (asyncio.CancelledError, GeneratorExit):  # GeneratorExit: the client left between two events
            code = "DEADLINE_EXCEEDED" if (context.time_remaining() or 1) <= 0 else "CANCELLED"
            raise
        except BaseException:  # a bug: the interceptor ends the call INTERNAL, and the SLO must count it so
            code = "INTERNAL"
            raise
        finally:
            self._in_flight -= 1
            m.get("omnimesh_requests_in_flight").dec()
            outcome = "ok" if code == "OK" else "cancelled" if code in ("CANCELLED", "DEADLINE_EXCEEDED") else "error"
            m.get("omnimesh_requests_total", outcome=outcome, code=code).inc()
            m.get("omnimesh_finished_requests_total", finish_reason=finish if code == "OK" else "abort").inc()
            if code == "OK":  # the latency SLO is over answers; refusals in microseconds would flatter it
                m.get("omnimesh_e2e_request_latency_seconds").observe(time.monotonic() - t0)
            self._close_timeline(context, code)

    def _close_timeline(self, context: grpc.aio.ServicerContext, code: str) -> None:
        """The trailer and the phase histogram of an answered call; a warning naming every phase for a call whose
        first token (or, with none, its end) came past gateway.slow_first_token_s, whatever its outcome."""
        timeline = current_timeline()
        assert timeline is not None  # _served opened it in this call's context
        timeline.end_phase("rest")
        trailer = timeline.trailer()
        if code == "OK":
            context.set_trailing_metadata(((TIMING_TRAILER, trailer),))
            for phase, seconds in timeline.phases().items():
                self._service.metrics.get("omnimesh_request_phase_seconds", phase=phase).observe(seconds)
        first = timeline.first_token_s()
        waited = first if first is not None else time.monotonic() - timeline.start
        if self._cfg.slow_first_token_s and waited >= self._cfg.slow_first_token_s:
            log.warning("slow request (%s): %.0f ms %s; ms by phase: %s", code, waited * 1e3,
                        "to its first token" if first is not None else "and no token", trailer)

    async def Info(self, request: common_pb2.InfoRequest, context: grpc.aio.ServicerContext) -> omni_pb2.OmniInfo:
        """The gateway's own description (fixed at start) with each stage's Info, asked now."""
        check_api_key(context.invocation_metadata() or (), self._keys)
        refuse_undecodable(request)
        stages = await self._service.stage_infos()
        info = omni_pb2.OmniInfo()
        info.CopyFrom(self._info)
        info.stages.extend(stages)
        info.voices.extend(v for s in stages if s.stage == "talker" for v in s.voices)
        return info


_FINISH_NAMES = {common_pb2.FINISH_REASON_STOP: "stop", common_pb2.FINISH_REASON_LENGTH: "length"}


def _finish_reason(event: Message, so_far: str) -> str:
    """How the stream ends as its events say: a Done event's reason (cancelled or failed ones count as abort)."""
    if isinstance(event, omni_pb2.ChatEvent) and event.HasField("done"):
        return _FINISH_NAMES.get(event.done.finish_reason, "abort")
    return so_far


def _to_pb(seq: int, ev: ChatEventOut) -> omni_pb2.ChatEvent:
    if isinstance(ev, TextEvent):
        return omni_pb2.ChatEvent(sequence=seq, text=omni_pb2.TextDelta(text=ev.text, token_ids=ev.token_ids,
                                                                        logprobs=ev.logprobs))
    if isinstance(ev, ReasoningEvent):
        return omni_pb2.ChatEvent(sequence=seq, reasoning=omni_pb2.TextDelta(text=ev.text, token_ids=ev.token_ids,
                                                                             logprobs=ev.logprobs))
    if isinstance(ev, AudioEvent):
        return omni_pb2.ChatEvent(sequence=seq, audio=ev.chunk)
    if isinstance(ev, ErrorEvent):
        return omni_pb2.ChatEvent(sequence=seq, error=omni_pb2.Error(code=ev.code, message=ev.message, stage=ev.stage))
    if isinstance(ev, UsageEvent):
        return omni_pb2.ChatEvent(sequence=seq, usage=ev.usage)
    return omni_pb2.ChatEvent(sequence=seq, done=omni_pb2.Done(finish_reason=ev.finish_reason))


async def _decodable(chunks: AsyncIterator[Any]) -> AsyncIterator[omni_pb2.TranscribeChunk]:
    """A client stream's messages, each refused as a unary request is when its bytes do not parse."""
    async for chunk in chunks:
        refuse_undecodable(chunk)
        yield chunk


def _transcribe_to_pb(seq: int, ev: TranscribeEventOut | PartialEvent) -> omni_pb2.TranscribeEvent:
    if isinstance(ev, PartialEvent):
        return omni_pb2.TranscribeEvent(sequence=seq, partial=omni_pb2.Transcript(language=ev.language, text=ev.text))
    if isinstance(ev, LanguageEvent):
        return omni_pb2.TranscribeEvent(sequence=seq, language=ev.language)
    if isinstance(ev, TextEvent):
        return omni_pb2.TranscribeEvent(sequence=seq, text=omni_pb2.TextDelta(text=ev.text, token_ids=ev.token_ids))
    if isinstance(ev, TranscriptEvent):
        return omni_pb2.TranscribeEvent(sequence=seq, transcript=omni_pb2.Transcript(language=ev.language,
                                                                                   text=ev.text))
    if isinstance(ev, UsageEvent):
        return omni_pb2.TranscribeEvent(sequence=seq, usage=ev.usage)
    return omni_pb2.TranscribeEvent(sequence=seq, done=omni_pb2.Done(finish_reason=ev.finish_reason))
