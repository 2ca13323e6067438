"""The gateway's domain: one chat request through the stages, as one ordered stream of events."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from omnimesh.v1 import common_pb2
from runtime.errors import InvalidArgument, OmniError, Unavailable, Unimplemented, preview
from runtime.metrics import Metrics
from gateway.chat_input import ChatInput
from gateway.clients.talker import SpeakSetup, TalkerClient
from gateway.clients.thinker import TextChunk, ThinkerClient, ThinkerDone, ThinkerPrompt
from gateway.media_prep import MediaPipeline, by_headers, thinker_media
from gateway.prompt import PromptBuilder
from gateway.reasoning import ReasoningChunk, ReasoningMarkers, ReasoningSplit
from gateway.speech import AudioEvent, ErrorEvent, speak_along
from gateway.timeline import end_phase

log = logging.getLogger(__name__)


@dataclass
class TextEvent:
    text: str
    token_ids: list[int]
    logprobs: list[common_pb2.TokenLogprob]


@dataclass
class ReasoningEvent:
    """A Thinking model's thoughts (gateway/reasoning.py), before its answer's TextEvents."""

    text: str
    token_ids: list[int]
    logprobs: list[common_pb2.TokenLogprob]


@dataclass
class UsageEvent:
    usage: common_pb2.Usage


@dataclass
class DoneEvent:
    finish_reason: int  # common_pb2.FinishReason


ChatEventOut = TextEvent | ReasoningEvent | AudioEvent | ErrorEvent | UsageEvent | DoneEvent


class OmniService:
    """Routes a request: builds the prompt, calls the thinker, and orders what comes back."""

    def __init__(self, prompts: PromptBuilder, thinker: ThinkerClient, media: MediaPipeline,
                 talker: TalkerClient | None, metrics: Metrics, stage_timeout_s: float,
                 reasoning: ReasoningMarkers | None = None) -> None:
        """`reasoning`: the markers of a Thinking model's reasoning (ReasoningMarkers.of); None: it does not reason."""
        self.prompts = prompts
        self.thinker = thinker
        self.media = media
        self.talker = talker
        self.metrics = metrics
        self.stage_timeout_s = stage_timeout_s
        self._max_model_len: int | None = None  # from the thinker's Info, fetched on first use
        self._voices: list[str] | None = None  # from the talker's Info
        self.reasoning = reasoning

    def check_served(self, chat: ChatInput) -> None:
        if chat.want_audio and self.talker is None:
            raise Unimplemented("output_modalities: audio output is not served by this deployment (no talker stage; "
                                "it serves text output only)")

    async def max_model_len(self) -> int:
        if self._max_model_len is None:
            info = await self.thinker.info(self.stage_timeout_s)
            self._max_model_len = int(info.limits["max_model_len"])
        return self._max_model_len

    async def voices(self) -> list[str]:
        if self._voices is None:
            assert self.talker is not None
            self._voices = list((await self.talker.info(self.stage_timeout_s)).voices)
        return self._voices

    async def stage_infos(self) -> list[common_pb2.StageInfo]:
        """Every stage this gateway routes to, each thinker replica apart, asked now (so a replica swapped since start
        answers for itself); any that does not answer within the stage timeout makes the call UNAVAILABLE, naming
        each such stage."""
        others = [*self.media.encoders, *([self.talker] if self.talker else [])]
        calls = [*self.thinker.replica_infos(self.stage_timeout_s), *(c.info(self.stage_timeout_s) for c in others)]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        failed = [a for a in answers if isinstance(a, BaseException)]
        unexpected = next((a for a in failed if not isinstance(a, OmniError)), None)
        if unexpected is not None:
            raise unexpected
        if failed:
            stages = [getattr(a, "stage", "") for a in failed]
            raise Unavailable("; ".join(str(a) for a in failed), stage=",".join(s for s in stages if s))
        return list(answers)

    async def chat(self, chat: ChatInput, timeout: float | None,
                   prompt: ThinkerPrompt | None = None) -> AsyncIterator[ChatEventOut]:
        """`prompt`: the thinker prompt already made (its media encoded) by the caller; None: made here from `chat`."""
        t0 = time.monotonic()
        self.check_served(chat)
        if chat.want_audio and chat.voice and chat.voice.lower() not in (voices := await self.voices()):
            raise InvalidArgument("voice", f"unknown voice {preview(chat.voice)}; this deployment speaks "
                                  f"{', '.join(voices)}")
        if prompt is None:
            prompt = await self._thinker_prompt(chat, timeout)
        stream = self.thinker.generate(prompt, chat.sampling, want_conditioning=chat.want_audio, timeout=timeout)
        if chat.want_audio:
            assert self.talker is not None
            setup = SpeakSetup(chat.request_id, chat.voice.lower(), prompt.token_ids, prompt.media, chat.return_codes,
                               chat.speech_sampling)
            stream = speak_along(stream, self.talker, setup, self.metrics, t0, timeout)
        clock = TextClock(self.metrics, t0)
        split = ReasoningSplit(self.reasoning, prompt.token_ids) if self.reasoning else None
        async for out in stream:
            if isinstance(out, TextChunk):
                end_phase("first_token")
                clock.arrived(len(out.token_ids))
                for piece in split.feed(out) if split else [out]:
                    if isinstance(piece, ReasoningChunk):
                        yield ReasoningEvent(piece.text, piece.token_ids, piece.logprobs)
                    else:
                        yield TextEvent(piece.text, piece.token_ids, piece.logprobs)
            elif isinstance(out, ThinkerDone):
                self.metrics.get("omnimesh_prompt_tokens_total").inc(out.usage.prompt_tokens)
                self.metrics.get("omnimesh_generation_tokens_total").inc(out.usage.completion_tokens)
                yield UsageEvent(out.usage)
                yield DoneEvent(out.finish_reason)
            else:
                yield out  # AudioEvent or ErrorEvent

    async def _thinker_prompt(self, chat: ChatInput, timeout: float | None) -> ThinkerPrompt:
        """Media admitted by their headers and decoded, the prompt laid out and checked against the context, the media
        encoded; the decoded media count against the gateway's media budget until the encoders took them."""
        footprint = 0
        if chat.media:
            self.media.check_served(chat.media, chat.use_audio_in_video)
            await self._check_media_fits(chat)
            footprint = await by_headers(chat.media, self.media.footprint, chat.media, chat.use_audio_in_video)
        end_phase("admit")
        try:
            return await self._decoded_prompt(chat, footprint, timeout)
        finally:
            # this frame held the decoded media, or a long text's tokenization buffers (tokenizers' threads keep
            # what they freed in glibc arenas: 1 Mi characters left the gateway 110 MB larger): garbage now
            if chat.media or sum(len(p) for t in chat.turns for p in t.parts if isinstance(p, str)) >= LONG_TEXT:
                self.media.return_memory_when_idle()

    async def _decoded_prompt(self, chat: ChatInput, footprint: int, timeout: float | None) -> ThinkerPrompt:
        with self.media.budget.hold(footprint):
            decoded = await self.media.decode(chat.media, chat.use_audio_in_video)
            end_phase("decode")
            prompt = await asyncio.to_thread(self.prompts.build, chat, decoded)  # a 1 MB text tokenizes for a second
            context_len = await self.max_model_len()
            if len(prompt.ids) >= context_len:
                raise InvalidArgument("messages", f"the prompt is {len(prompt.ids)} tokens; the model's context is "
                                      f"{context_len} tokens and must leave room for at least one new token")
            end_phase("prompt")
            encoded = await self.media.encode(chat.request_id, decoded, timeout) if decoded else []
            end_phase("encode")
            spans, tensors = thinker_media(prompt.spans, decoded, encoded)
        return ThinkerPrompt(chat.request_id, prompt.ids, spans, tensors, chat.use_audio_in_video)

    async def _check_media_fits(self, chat: ChatInput) -> None:
        """Twelve 8000x8000 PNGs decoded for 12 s before the prompt check refused them: their headers say as much
        (a video's too: its header and packets give the frames the reference samples)."""
        media_len = await by_headers(chat.media, self.media.header_tokens, chat.media)
        if media_len and media_len >= (context_len := await self.max_model_len()):
            raise InvalidArgument("messages", f"the media alone take {media_len} tokens by their headers; "
                                  f"the model's context is {context_len} tokens; send fewer or smaller images, or "
                                  "shorter videos and clips")


LONG_TEXT = 1 << 16  # characters of a request's text past which its tokenization's memory is handed back


class TextClock:
    """Time to first token, then the gap per token of each later delta."""

    def __init__(self, metrics: Metrics, t0: float) -> None:
        self._ttft = metrics.get("omnimesh_time_to_first_token_seconds")
        self._itl = metrics.get("omnimesh_inter_token_latency_seconds")
        self._t0 = t0
        self._last: float | None = None

    def arrived(self, num_tokens: int) -> None:
        now = time.monotonic()
        if self._last is None:
            self._ttft.observe(now - self._t0)
        elif num_tokens:
            gap = (now - self._last) / num_tokens
            for _ in range(num_tokens):
                self._itl.observe(gap)
        self._last = now
