"""TranscribeStream: audio that arrives as it is recorded (16-bit mono PCM chunks) is transcribed as a whole once the
client closes its side, through Transcribe's path (so the final transcript is the one a whole-file Transcribe of
the same samples gives); while it arrives, partial transcripts of the audio so far.

A partial reuses the work of those before it (transcribe_windows.py): the audio stage encodes only the encoder
attention windows (8 s) finished since, plus the unfinished tail, and the thinker prefills only past its cached
prefix, which covers every finished window. Partials are approximate (each window's log-mel is made from that window
alone); the final transcript never is: it is made from scratch, exactly as a whole-file Transcribe."""
from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

import numpy as np

from omnimesh.v1 import omni_pb2
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument
from gateway.media.wav import wav_file
from gateway.timeline import open_timeline
from gateway.transcribe import TranscribeEventOut, TranscribeInput, TranscribeService, TranscriptEvent
from gateway.transcribe import transcribe_input_from_pb, with_audio
from gateway.transcribe_windows import WindowCache

MIN_RATE, MAX_RATE = 8_000, 48_000
MIN_PARTIAL_EVERY_S = 0.5  # each partial still re-encodes the tail window and prefills past the last window


@dataclass
class PartialEvent:
    language: str
    text: str


@dataclass(frozen=True)
class StreamSettings:
    job: TranscribeInput  # the settings as a Transcribe of a placeholder clip; each run swaps the audio in
    sample_rate: int
    partial_every_s: float


def stream_settings_from_pb(first: omni_pb2.TranscribeChunk, defaults: SamplingDefaults) -> StreamSettings:
    """The first chunk's config, checked field by field (the Transcribe fields as Transcribe checks them)."""
    if not first.HasField("config"):
        raise InvalidArgument("config", "is missing from the first chunk; send the settings (sample_rate, ...) "
                                        "in the first TranscribeChunk")
    cfg = first.config
    if not MIN_RATE <= cfg.sample_rate <= MAX_RATE:
        raise InvalidArgument("config.sample_rate", f"is {cfg.sample_rate}; send the PCM's rate, {MIN_RATE} to "
                                                    f"{MAX_RATE} samples per second")
    every = cfg.partial_every_s
    if not (every == 0 or (math.isfinite(every) and every >= MIN_PARTIAL_EVERY_S)):
        raise InvalidArgument("config.partial_every_s", f"is {every}; 0 (no partials) or at least "
                                                        f"{MIN_PARTIAL_EVERY_S} seconds")
    placeholder = omni_pb2.Media(data=pcm16_wav(b"\0\0", cfg.sample_rate))
    request = omni_pb2.TranscribeRequest(request_id=cfg.request_id, audio=placeholder, language=cfg.language,
                                         context=cfg.context, sampling=cfg.sampling)
    try:
        job = transcribe_input_from_pb(request, defaults)
    except InvalidArgument as err:
        raise InvalidArgument(f"config.{err.violations[0].field}", err.violations[0].description) from None
    return StreamSettings(job, cfg.sample_rate, every)


def pcm16_wav(pcm16: bytes, sample_rate: int) -> bytes:
    """The samples as a 16-bit WAV file: decoding it gives them back exactly."""
    return wav_file(np.frombuffer(pcm16, dtype="<i2"), sample_rate)


class PcmBuffer:
    """The audio received so far; `fill` reads the chunks after the first, checking each, until the client closes
    its side. `changed` is set whenever audio arrives or the stream ends (or fails)."""

    def __init__(self, sample_rate: int, max_seconds: float) -> None:
        self.pcm = bytearray()
        self.sample_rate = sample_rate
        self.max_bytes = int(max_seconds * sample_rate) * 2
        self.max_seconds = max_seconds
        self.closed = False
        self.changed = asyncio.Event()

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate

    def add(self, chunk: omni_pb2.TranscribeChunk, index: int) -> None:
        if index > 0 and chunk.HasField("config"):
            raise InvalidArgument("config", f"is set in chunk {index}; send it in the first chunk only")
        if len(chunk.pcm16) % 2:
            raise InvalidArgument("pcm16", f"chunk {index} holds {len(chunk.pcm16)} bytes; 16-bit samples come in "
                                           "whole pairs of bytes")
        if len(self.pcm) + len(chunk.pcm16) > self.max_bytes:
            raise InvalidArgument("pcm16", f"the audio passes {self.max_seconds:g} s at chunk {index}; at most "
                                           "gateway.max_audio_seconds of audio per stream")
        self.pcm += chunk.pcm16
        self.changed.set()

    async def fill(self, chunks: AsyncIterator[omni_pb2.TranscribeChunk]) -> None:
        try:
            index = 1
            async for chunk in chunks:
                self.add(chunk, index)
                index += 1
        finally:
            self.closed = True
            self.changed.set()

    async def wait(self, seconds: float) -> None:
        """Until at least `seconds` of audio are here, or the stream has ended."""
        while not self.closed and self.seconds < seconds:
            self.changed.clear()
            await self.changed.wait()


async def transcribe_stream(transcriber: TranscribeService, settings: StreamSettings, audio: PcmBuffer,
                            chunks: AsyncIterator[omni_pb2.TranscribeChunk], remaining: Callable[[], float | None]
                            ) -> AsyncIterator[TranscribeEventOut | PartialEvent]:
    """Partials while `chunks` arrive (one at a time: the next once the last is out and enough new audio came),
    then the whole audio's Transcribe events. A bad chunk ends the call with its error, partial or not.
    `remaining`: the call's time left (each run gets what is left when it starts)."""
    reader = asyncio.create_task(audio.fill(chunks))
    try:
        done_upto, num = 0.0, 0
        windows = WindowCache()  # this stream's encoded windows, for its partials only
        while settings.partial_every_s:
            await audio.wait(done_upto + settings.partial_every_s)
            if audio.closed:
                break
            upto = len(audio.pcm)
            job = replace(settings.job.chat, request_id=f"{settings.job.chat.request_id}-partial{num}")
            async for ev in transcriber.transcribe_partial(replace(settings.job, chat=job), bytes(audio.pcm[:upto]),
                                                           audio.sample_rate, windows, remaining()):
                if isinstance(ev, TranscriptEvent):
                    yield PartialEvent(ev.language, ev.text)
            done_upto, num = upto / 2 / audio.sample_rate, num + 1
        await reader  # the stream's end, or the error a chunk raised
        if not audio.pcm:
            raise InvalidArgument("pcm16", "no audio arrived; send the PCM in the chunks")
        whole = with_audio(settings.job.chat, settings.job.chat.request_id, pcm16_wav(bytes(audio.pcm),
                                                                                      audio.sample_rate))
        # the call's timing is the final transcript's, from the end of the audio: the wait a live speaker sees
        open_timeline()
        async for ev in transcriber.transcribe(replace(settings.job, chat=whole), remaining()):
            yield ev
    finally:
        reader.cancel()


