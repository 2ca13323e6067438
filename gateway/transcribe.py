"""The public Transcribe call on a Qwen3-ASR deployment: a TranscribeRequest becomes a chat whose prompt is
Qwen3-ASR's transcription layout, and the model's `language <Name><asr_text><text>` answer becomes a language
event, transcript deltas and the whole transcript."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from omnimesh.v1 import common_pb2, omni_pb2
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument, Unimplemented
from runtime.sampling import resolve_sampling
from gateway.chat_input import ChatInput, MediaBytes, Turn
from gateway.long_audio import MAX_WINDOW_S, header_seconds, pieces, wav_bytes
from gateway.media.audio import DEFAULT_MAX_SECONDS, TARGET_RATE, decode_audio
from gateway.media_prep import by_headers
from gateway.service import ChatEventOut, DoneEvent, OmniService, TextEvent, UsageEvent
from gateway.transcribe_windows import (
    DEFAULT_WINDOW_SAMPLES, WindowCache, audio_client, cut, partial_prompt, stream_samples,
)
from gateway.transcription import ASR_TEXT, assistant_prefill, language_name

MAX_CONTEXT_CHARS = 10_000
UNSPACED_LANGUAGES = frozenset({"Chinese", "Cantonese", "Japanese", "Thai"})
MAX_CONTEXT_TOKENS = 2_048  # hotwords and domain terms, not documents: it is prefilled with every clip
MAX_REQUEST_ID_CHARS = 128
NO_SPEECH = "None"  # what the model names as the language of silence


@dataclass
class LanguageEvent:
    language: str  # "" when the model heard no speech


@dataclass
class TranscriptEvent:
    language: str
    text: str


TranscribeEventOut = LanguageEvent | TextEvent | TranscriptEvent | UsageEvent | DoneEvent


@dataclass(frozen=True)
class TranscribeInput:
    chat: ChatInput
    language: str | None  # the forced language's name
    context: str = ""


def transcribe_input_from_pb(req: omni_pb2.TranscribeRequest, defaults: SamplingDefaults) -> TranscribeInput:
    """Validates every field; greedy unless the request sets a temperature."""
    if len(req.request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidArgument("request_id", f"has {len(req.request_id)} characters; at most {MAX_REQUEST_ID_CHARS}")
    if not req.audio.data:
        raise InvalidArgument("audio.data", "is empty; send the audio file's bytes")
    if len(req.context) > MAX_CONTEXT_CHARS:
        raise InvalidArgument("context", f"has {len(req.context)} characters; at most {MAX_CONTEXT_CHARS}")
    language = language_name(req.language)
    sampling = resolve_sampling(req.sampling, replace(defaults, temperature=0.0))
    turns = (*((Turn("system", (req.context,)),) if req.context else ()),
             Turn("user", (MediaBytes("audio", req.audio.data, req.audio.mime_type, "audio"),)),
             Turn("assistant", (assistant_prefill(language),)))
    chat = ChatInput(request_id=req.request_id or uuid.uuid4().hex, turns=turns, sampling=sampling,
                     want_audio=False, voice="", return_codes=False, use_audio_in_video=False, continue_final=True)
    return TranscribeInput(chat, language, req.context)


class TranscribeService:
    """Runs transcriptions through the chat path; only a Qwen3-ASR deployment serves them. Audio longer than
    `window_s` is transcribed window by window (see long_audio.py), the pieces' transcripts joined."""

    def __init__(self, service: OmniService, family: str, max_audio_seconds: float = DEFAULT_MAX_SECONDS,
                 window_s: float = MAX_WINDOW_S, stream_window_samples: int = DEFAULT_WINDOW_SAMPLES) -> None:
        """`stream_window_samples`: the audio encoder's attention window in 16 kHz samples (transcribe_windows.py)."""
        self.service = service
        self.family = family
        self.max_audio_seconds = max_audio_seconds
        self.window_s = window_s
        self.stream_window_samples = stream_window_samples

    def check_family(self) -> None:
        if self.family != "qwen3-asr":
            raise Unimplemented(f"Transcribe: this deployment serves {self.family}, not a Qwen3-ASR model; "
                                "send the audio to Chat instead")

    async def transcribe(self, request: TranscribeInput, timeout: float | None) -> AsyncIterator[TranscribeEventOut]:
        self.check_family()
        await self.check_context(request.context)
        audio = request.chat.media[0]
        if await by_headers([audio], header_seconds, audio.data) > self.window_s:
            async for ev in self._transcribe_long(request, audio, timeout):
                yield ev
            return
        async for ev in self.answer(request, self.service.chat(request.chat, timeout)):
            yield ev

    async def transcribe_partial(self, request: TranscribeInput, pcm16: bytes, sample_rate: int, cache: WindowCache,
                                 timeout: float | None) -> AsyncIterator[TranscribeEventOut]:
        """A partial transcript of a stream's audio so far that reuses `cache`'s encoded windows and the thinker's
        cached prefix (transcribe_windows.py); nothing when too little audio has come to make one. Audio past
        `window_s` is transcribed as Transcribe does it, window by window, without reuse."""
        self.check_family()
        await self.check_context(request.context)
        samples = await asyncio.to_thread(stream_samples, pcm16, sample_rate)
        if samples.shape[0] > self.window_s * TARGET_RATE:
            chat = with_audio(request.chat, request.chat.request_id, wav_bytes(samples))
            async for ev in self.transcribe(replace(request, chat=chat), timeout):
                yield ev
            return
        pieces = cut(samples, self.stream_window_samples)
        if not pieces:
            return
        self.service.media.check_served(request.chat.media, use_audio_in_video=False)
        audio = audio_client(self.service)
        assert audio is not None  # check_served refuses audio when no audio stage is routed to
        embeddings = await cache.embeddings(audio, request.chat.request_id, pieces, timeout)
        prompt = await partial_prompt(self.service, request.chat, pieces, embeddings)
        async for ev in self.answer(request, self.service.chat(request.chat, timeout, prompt=prompt)):
            yield ev

    async def answer(self, request: TranscribeInput, chat_events: AsyncIterator[ChatEventOut]
                     ) -> AsyncIterator[TranscribeEventOut]:
        """One chat's events as a transcription's: the model's answer split into language and transcript."""
        split = AnswerSplitter(request.language, self.service.prompts.tokenizer.token_id(ASR_TEXT))
        async for ev in chat_events:
            if isinstance(ev, TextEvent):
                for out in split.feed(ev):
                    yield out
            elif isinstance(ev, UsageEvent):
                for out in split.finish():
                    yield out
                yield ev
            else:
                yield ev

    async def _transcribe_long(self, request: TranscribeInput, audio: MediaBytes,
                               timeout: float | None) -> AsyncIterator[TranscribeEventOut]:
        """One chat per window, in order: the first window's language, every window's deltas, then the joined
        transcript, the summed usage and the last window's finish reason."""
        decoded = await asyncio.to_thread(decode_audio, audio.data, audio.field, self.max_audio_seconds)
        language, texts, usage, finish = request.language, [], common_pb2.Usage(), common_pb2.FINISH_REASON_STOP
        for i, piece in enumerate(pieces(decoded.samples, self.window_s)):
            chat = with_audio(request.chat, f"{request.chat.request_id}-{i}", wav_bytes(piece))
            split = AnswerSplitter(request.language, self.service.prompts.tokenizer.token_id(ASR_TEXT))
            async for ev in self.service.chat(chat, timeout):
                if isinstance(ev, DoneEvent):
                    finish = ev.finish_reason
                    continue
                if isinstance(ev, UsageEvent):
                    add_usage(usage, ev.usage)
                for out in split.feed(ev) if isinstance(ev, TextEvent) else split.finish():  # text, or usage
                    if isinstance(out, TranscriptEvent):
                        texts.append(out.text)
                    elif isinstance(out, LanguageEvent):
                        if i == 0:  # later windows name their own; the stream keeps the first's
                            language = out.language
                            yield out
                    else:
                        yield out
        yield TranscriptEvent(language or "", join_pieces(texts, language or ""))
        yield UsageEvent(usage)
        yield DoneEvent(finish)

    async def check_context(self, context: str) -> None:
        if not context:
            return
        num_tokens = len(await asyncio.to_thread(self.service.prompts.tokenizer.encode, context, False))
        if num_tokens > MAX_CONTEXT_TOKENS:
            raise InvalidArgument("context", f"is {num_tokens} tokens; at most {MAX_CONTEXT_TOKENS}: keep it to the "
                                             "hotwords, names and terms the audio may hold")


def with_audio(chat: ChatInput, request_id: str, wav: bytes) -> ChatInput:
    """The chat with its one audio item replaced by `wav`."""
    turns = tuple(Turn(t.role, tuple(MediaBytes("audio", wav, "audio/wav", p.field) if isinstance(p, MediaBytes)
                                     else p for p in t.parts)) for t in chat.turns)
    return replace(chat, request_id=request_id, turns=turns)


def add_usage(total: common_pb2.Usage, usage: common_pb2.Usage) -> None:
    for f in usage.DESCRIPTOR.fields:
        setattr(total, f.name, getattr(total, f.name) + getattr(usage, f.name))


def join_pieces(texts: list[str], language: str) -> str:
    """Scripts without spaces between words are joined as they are; others with one space."""
    sep = "" if language in UNSPACED_LANGUAGES else " "
    return sep.join(t for t in texts if t)


class AnswerSplitter:
    """Splits the model's answer at `<asr_text>`: the header before it names the language; what follows is the
    transcript. With a forced language the prompt already holds the header, so every token is transcript."""

    def __init__(self, forced: str | None, asr_text_id: int) -> None:
        self.language: str | None = forced
        self.asr_text_id = asr_text_id
        self.header_text = ""
        self.header_ids: list[int] = []
        self.text = ""
        self.announced = False

    def feed(self, ev: TextEvent) -> list[TranscribeEventOut]:
        if self.language is not None:
            return [*self._announce(), *self._transcript(ev.text, ev.token_ids)]
        self.header_text += ev.text
        self.header_ids += ev.token_ids
        if ASR_TEXT not in self.header_text:
            return []
        header, rest = self.header_text.split(ASR_TEXT, 1)
        named = header.strip().removeprefix("language").strip()
        self.language = "" if named in ("", NO_SPEECH) else named
        ids = self.header_ids
        cut = ids.index(self.asr_text_id) + 1 if self.asr_text_id in ids else len(ids)
        return [*self._announce(), *self._transcript(rest, ids[cut:])]

    def finish(self) -> list[TranscribeEventOut]:
        """An answer without `<asr_text>` is all transcript, in no named language (as transformers parses it)."""
        out: list[TranscribeEventOut] = []
        if self.language is None:
            self.language = ""
            out += [*self._announce(), *self._transcript(self.header_text, self.header_ids)]
        return [*out, *self._announce(), TranscriptEvent(self.language, self.text.strip())]

    def _announce(self) -> list[TranscribeEventOut]:
        if self.announced or self.language is None:
            return []
        self.announced = True
        return [LanguageEvent(self.language)]

    def _transcript(self, text: str, token_ids: list[int]) -> list[TranscribeEventOut]:
        if not text and not token_ids:
            return []
        self.text += text
        return [TextEvent(text, token_ids, [])]
