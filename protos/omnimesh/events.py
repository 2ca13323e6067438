"""What a chat stream yields, as plain Python: text deltas with logprobs, audio chunks, usage, the end; and a reply
gathered from them."""
from __future__ import annotations

import io
import wave
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from omnimesh.v1 import common_pb2, omni_pb2

SAMPLE_RATE = 24_000  # of the spoken answer


@dataclass(frozen=True)
class TopLogprob:
    """An alternative at a position. `token` is its text (`bytes` decoded, a partial UTF-8 character replaced)."""

    token_id: int
    token: str
    bytes: bytes
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token, its log-probability and the most likely alternatives, most likely first."""

    token_id: int
    token: str
    bytes: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class TextDelta:
    """New text; `text` may be empty while a multi-byte character is incomplete."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ReasoningDelta:
    """A Thinking model's reasoning, before its answer's TextDeltas (the `<think>` block, without the markers)."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class AudioDelta:
    """A piece of the spoken answer: 16-bit mono PCM at `sample_rate`."""

    pcm16: bytes
    sample_rate: int
    index: int
    num_frames: int = 0
    codes: tuple[int, ...] = ()  # frame-major (num_frames x num_code_groups), when asked for
    num_code_groups: int = 0

    @property
    def samples(self) -> np.ndarray:
        """int16 samples, shape [n]."""
        return np.frombuffer(self.pcm16, dtype="<i2")

    def float32(self) -> np.ndarray:
        """Samples in [-1, 1), shape [n]."""
        return self.samples.astype(np.float32) / 32768.0

    def wav(self) -> bytes:
        return wav_bytes(self.pcm16, self.sample_rate)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0
    audio_seconds: float = 0.0


@dataclass(frozen=True)
class AudioFailed:
    """The speech stopped (its stage failed); the text goes on and the stream still ends with Done."""

    code: str  # gRPC status code name, e.g. "UNAVAILABLE"
    message: str
    stage: str


@dataclass(frozen=True)
class Done:
    finish_reason: str  # "stop" (end of turn, stop token or string) or "length" (max_tokens or the context)
    # where the call's time went, ms by phase and stage, from the gateway's trailer (omnimesh/timing.py); empty when
    # it sent none. Not part of the event's equality or hash: two answers that ended alike are alike, however long
    timing: Mapping[str, float] = field(default_factory=dict, compare=False)


Event = TextDelta | ReasoningDelta | AudioDelta | Usage | AudioFailed | Done


def _token_text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def logprob_from_pb(lp: common_pb2.TokenLogprob) -> TokenLogprob:
    top = tuple(TopLogprob(t.token_id, _token_text(t.token), t.token, t.logprob) for t in lp.top)
    return TokenLogprob(lp.token_id, _token_text(lp.token), lp.token, lp.logprob, top)


def event_from_pb(ev: omni_pb2.ChatEvent) -> Event:
    kind = ev.WhichOneof("event")
    if kind == "text":
        return TextDelta(ev.text.text, tuple(ev.text.token_ids), tuple(map(logprob_from_pb, ev.text.logprobs)))
    if kind == "reasoning":
        r = ev.reasoning
        return ReasoningDelta(r.text, tuple(r.token_ids), tuple(map(logprob_from_pb, r.logprobs)))
    if kind == "audio":
        a = ev.audio
        return AudioDelta(a.pcm16, a.sample_rate or SAMPLE_RATE, a.index, a.num_frames, tuple(a.codes),
                          a.num_code_groups)
    if kind == "usage":
        u = ev.usage
        return Usage(u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens, u.audio_seconds)
    if kind == "error":
        return AudioFailed(ev.error.code, ev.error.message, ev.error.stage)
    reason = common_pb2.FinishReason.Name(ev.done.finish_reason).removeprefix("FINISH_REASON_").lower()
    return Done(reason)


def wav_bytes(pcm16: bytes, sample_rate: int = SAMPLE_RATE) -> bytes:
    """16-bit mono PCM as the bytes of a WAV file."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm16)
    return buf.getvalue()


@dataclass
class Reply:
    """A whole answer, gathered from its events (Client.chat / AsyncClient.chat)."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    reasoning: str = ""  # a Thinking model's thoughts (their tokens are in token_ids too, before the answer's)
    pcm16: bytes = b""  # the whole speech, when it was asked for
    sample_rate: int = SAMPLE_RATE
    usage: Usage | None = None
    finish_reason: str = ""
    audio_failed: AudioFailed | None = None
    timing: Mapping[str, float] = field(default_factory=dict)  # Done.timing

    def add(self, event: Event) -> None:
        if isinstance(event, (TextDelta, ReasoningDelta)):
            if isinstance(event, TextDelta):
                self.text += event.text
            else:
                self.reasoning += event.text
            self.token_ids.extend(event.token_ids)
            self.logprobs.extend(event.logprobs)
        elif isinstance(event, AudioDelta):
            self.pcm16 += event.pcm16
            self.sample_rate = event.sample_rate
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, AudioFailed):
            self.audio_failed = event
        else:
            self.finish_reason, self.timing = event.finish_reason, event.timing

    @property
    def audio(self) -> np.ndarray:
        """The speech as int16 samples, shape [n] (empty without speech)."""
        return np.frombuffer(self.pcm16, dtype="<i2")

    def wav(self) -> bytes:
        """The speech as a WAV file's bytes."""
        return wav_bytes(self.pcm16, self.sample_rate)
