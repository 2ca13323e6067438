"""Protobuf <-> talker domain: reads a Speak request stream (setup, then text as it comes), writes responses."""
from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import torch

from omnimesh.v1 import common_pb2, talker_pb2
from runtime.config import SpeechConfig
from runtime.errors import InvalidArgument
from runtime.tensor_codec import TensorAssembler
from services.talker.prompt_check import (
    CONDITIONING, CheckedPrompt, PromptLimits, check_conditioning, check_prompt, speech_prompt,
)
from services.talker.request import SAMPLE_RATE, AudioOut, FinishedOut, SpeakInput, SpeechFinish
from services.talker.speak_sampling import resolve_speech_sampling
from services.talker.voices import resolve_voice

FINISH_TO_PB = {SpeechFinish.STOP: common_pb2.FINISH_REASON_STOP,
                SpeechFinish.LENGTH: common_pb2.FINISH_REASON_LENGTH}


@dataclass(frozen=True)
class SpeakLimits:
    prompt: PromptLimits
    speech: SpeechConfig
    voices: list[str]  # the default first

    @property
    def thinker_hidden(self) -> int:
        return self.prompt.cfg.lm.thinker_hidden_size


class SpeakReader:
    """One Speak call's request stream: `read_setup()` up to the first thinker text, then `text()` for the rest."""

    def __init__(self, requests: AsyncIterator[talker_pb2.SpeakRequest], limits: SpeakLimits) -> None:
        self._requests = requests
        self._limits = limits
        self._first_text: talker_pb2.SpeakRequest | None = None  # read by read_setup, yielded by text()
        self._opened_at = time.monotonic()

    async def read_setup(self) -> SpeakInput:
        """start, then the conditioning chunks; returns once the first text message (or the stream's end) arrives."""
        first = await anext(self._requests, None)
        if first is None or first.WhichOneof("msg") != "start":
            raise InvalidArgument("start", "the first message of Speak must be `start`")
        start = first.start
        limits = self._limits
        voice = resolve_voice(start.voice, limits.voices)
        checked = check_prompt(start.prompt_token_ids, start.media, limits.prompt)
        sampling = resolve_speech_sampling(start.talker_sampling, start.code_predictor_sampling, limits.speech)
        media_hidden = await self._read_conditioning(checked)
        if checked.media_positions and media_hidden is None:
            raise InvalidArgument("conditioning", f"{CONDITIONING} must arrive before the first text: the prompt has "
                                  f"{len(checked.media_positions)} media placeholders")
        return SpeakInput(start.request_id, speech_prompt(checked, voice, media_hidden), sampling.sampling,
                          sampling.max_frames, start.return_codes, self._opened_at)

    async def _read_conditioning(self, checked: CheckedPrompt) -> torch.Tensor | None:
        # no more than the prompt's placeholders can use (float64 at most): a bigger shape is refused at its first chunk
        most = max(1, len(checked.media_positions)) * self._limits.thinker_hidden * 8
        assembler = TensorAssembler("conditioning", max_bytes=most)
        media_hidden: torch.Tensor | None = None
        async for msg in self._requests:
            kind = msg.WhichOneof("msg")
            if kind != "conditioning":
                self._first_text = msg
                break
            if msg.conditioning.name != CONDITIONING:
                raise InvalidArgument("conditioning.name", f"is {msg.conditioning.name!r}; expected {CONDITIONING!r}")
            if media_hidden is not None:
                raise InvalidArgument("conditioning", f"{CONDITIONING} arrived twice; send it once")
            done = self._add(assembler, msg.conditioning)
            if done is not None:
                media_hidden = check_conditioning(done, checked, self._limits.thinker_hidden)
        if assembler.pending:
            raise InvalidArgument("conditioning", f"the text began with {CONDITIONING} incomplete")
        return media_hidden

    @staticmethod
    def _add(assembler: TensorAssembler, chunk: common_pb2.Tensor) -> torch.Tensor | None:
        done = assembler.add(chunk)
        return None if done is None else done[1]

    async def text(self) -> AsyncIterator[list[int] | None]:
        """Thinker ids as they arrive, None at text_end; any message after text_end is an error."""
        ended = False
        vocab = self._limits.prompt.thinker_vocab
        async for msg in self._rest():
            kind = msg.WhichOneof("msg")
            if ended:
                raise InvalidArgument("text_end", f"a `{kind}` message followed text_end; text_end must be last")
            if kind == "text":
                ids = list(msg.text.token_ids)
                bad = next((t for t in ids if not 0 <= t < vocab), None)
                if bad is not None:
                    raise InvalidArgument("text.token_ids", f"holds {bad}, outside the thinker vocabulary [0, {vocab})")
                yield ids
            elif kind == "text_end":
                ended = True
                yield None
            elif kind == "conditioning":
                raise InvalidArgument("conditioning", f"{CONDITIONING} must come before the first text message")
            else:
                raise InvalidArgument(kind or "msg", "only one `start` is allowed, first" if kind else "is empty")

    async def _rest(self) -> AsyncIterator[talker_pb2.SpeakRequest]:
        if self._first_text is not None:
            yield self._first_text
        async for msg in self._requests:
            yield msg


def pcm16(samples: torch.Tensor) -> bytes:
    """Little-endian 16-bit PCM of float samples, clamped to [-1, 1]."""
    # clamping after the scale and rounding gives the same integers with one temporary less
    ints = torch.mul(samples.float(), 32767.0).round_().clamp_(-32767.0, 32767.0).to(torch.int16)
    return ints.numpy().astype("<i2", copy=False).tobytes()  # no copy on a little-endian host


def to_pb(out: AudioOut | FinishedOut, num_code_groups: int) -> talker_pb2.SpeakResponse:
    if isinstance(out, AudioOut):
        codes = out.codes.reshape(-1).tolist() if out.codes is not None else []  # [frames, G] frame-major
        return talker_pb2.SpeakResponse(audio=common_pb2.AudioChunk(
            pcm16=pcm16(out.samples), sample_rate=SAMPLE_RATE, index=out.index, codes=codes,
            num_frames=out.num_frames, num_code_groups=num_code_groups))
    return talker_pb2.SpeakResponse(finished=talker_pb2.SpeakFinished(
        num_frames=out.num_frames, audio_seconds=out.audio_seconds, finish_reason=FINISH_TO_PB[out.reason],
        timings=common_pb2.Timings(queue_seconds=out.queue_seconds, compute_seconds=out.compute_seconds)))
