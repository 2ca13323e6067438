"""The talker's domain messages: one Speak request in, its audio chunks and its finish out (no protobuf here)."""
from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import TalkerSampling

SAMPLE_RATE = 24_000  # Code2Wav's output rate (1,920 samples per codec frame)


@dataclass(frozen=True)
class SpeakInput:
    """Everything a request fixes before its first thinker token: prompt, voice, conditioning, sampling."""

    request_id: str
    prompt: SpeechPrompt  # media_hidden already cut to the user turns' media rows
    sampling: TalkerSampling
    max_frames: int
    return_codes: bool
    # time.monotonic() when the Speak call reached the servicer (None: not from a call): the gateway opens the call
    # with the request, so the wait from here to the first text is the thinker's first token plus the relays
    opened_at: float | None = None


class SpeechFinish(enum.Enum):
    STOP = "stop"  # the talker sampled the codec EOS
    LENGTH = "length"  # max_frames reached


@dataclass(frozen=True)
class AudioOut:
    """One decoded chunk: float samples in [-1, 1] and the frames behind them."""

    index: int
    samples: torch.Tensor  # float32 [n] on the host, 24 kHz mono
    num_frames: int
    codes: torch.Tensor | None  # int64 [num_frames, num_code_groups] when asked for


@dataclass(frozen=True)
class FinishedOut:
    reason: SpeechFinish
    num_frames: int
    audio_seconds: float
    queue_seconds: float  # first thinker token to the talker prefill
    compute_seconds: float  # wall time of the engine iterations the request took part in
