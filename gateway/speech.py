"""Text and speech of one request as one ordered stream: thinker tokens feed the talker while both stream back."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from omnimesh.v1 import common_pb2
from runtime.errors import OmniError
from runtime.metrics import Metrics
from gateway.clients.talker import SpeakSetup, SpeechDone, TalkerClient, TalkerFeed
from gateway.clients.thinker import Conditioning, TextChunk, ThinkerDone

log = logging.getLogger(__name__)
SAMPLE_RATE = 24_000


@dataclass
class AudioEvent:
    chunk: common_pb2.AudioChunk


@dataclass
class ErrorEvent:
    code: str
    message: str
    stage: str


@dataclass
class _Finished:
    source: str
    error: BaseException | None = None


class AudioClock:
    """Plays the chunks back in the mind: counts chunks that arrive after the previous one ran out."""

    def __init__(self, metrics: Metrics, t0: float) -> None:
        self._m = metrics
        self._t0 = t0
        self._play_end: float | None = None
        self.seconds = 0.0

    def arrived(self, chunk: common_pb2.AudioChunk) -> None:
        now = time.monotonic()
        duration = len(chunk.pcm16) / 2 / SAMPLE_RATE
        if self._play_end is None:
            self._m.get("omnimesh_time_to_first_audio_seconds").observe(now - self._t0)
            self._play_end = now
        elif now > self._play_end:
            self._m.get("omnimesh_audio_underruns_total").inc()
            self._play_end = now
        self._play_end += duration
        self.seconds += duration


class Timeline:
    """Milestones of one speech request in ms after its start, logged at DEBUG when it ends (the talker logs its own
    side: rows, prefill, frames to its first audio); together they say where a time to first audio went."""

    def __init__(self, t0: float) -> None:
        self._t0 = t0
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, (time.monotonic() - self._t0) * 1e3)  # the first time only

    def __str__(self) -> str:
        return ", ".join(f"{name} +{ms:.1f} ms" for name, ms in self.marks.items())


async def speak_along(thinker_stream: AsyncIterator, talker: TalkerClient, setup: SpeakSetup, metrics: Metrics,
                      t0: float, timeout: float | None) -> AsyncIterator[object]:
    """Yields TextChunk, AudioEvent, ErrorEvent (talker failed; text goes on), then ThinkerDone with audio seconds.

    The talker starts on the thinker's first token. A thinker failure ends the stream; a talker failure only
    ends the audio. Leaving early (client cancel) cancels both stage calls.
    """
    feed = TalkerFeed()
    out: asyncio.Queue = asyncio.Queue()
    clock = AudioClock(metrics, t0)
    timeline = Timeline(t0)
    timeline.mark("prompt built")

    async def run_thinker() -> None:
        try:
            async for item in thinker_stream:
                if isinstance(item, Conditioning):
                    timeline.mark("thinker conditioning")
                    feed.conditioning(item.media_hidden)
                    continue
                if isinstance(item, TextChunk):
                    timeline.mark("first text")
                    feed.tokens(item.token_ids)
                await out.put(item)
            out.put_nowait(_Finished("thinker"))
        except BaseException as e:
            out.put_nowait(_Finished("thinker", e))
            raise
        finally:
            feed.end()

    async def run_talker() -> None:
        try:
            async for item in talker.speak(setup, feed, timeout):
                if not isinstance(item, SpeechDone):
                    timeline.mark("first audio")
                    clock.arrived(item)
                    await out.put(AudioEvent(item))
        except OmniError as err:
            await out.put(ErrorEvent(err.grpc_code_name, f"audio failed: {err.message}", "talker"))
        out.put_nowait(_Finished("talker"))

    tasks = [asyncio.create_task(run_thinker()), asyncio.create_task(run_talker())]
    done: ThinkerDone | None = None
    try:
        finished = 0
        while finished < 2:
            item = await out.get()
            if isinstance(item, _Finished):
                finished += 1
                if item.error is not None:
                    raise item.error
            elif isinstance(item, ThinkerDone):
                done = item  # held back: usage and done come after the last audio chunk
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    timeline.mark("end")
    log.debug("speech: %s; %.2f s of audio", timeline, clock.seconds)  # the request id is in the log context
    if clock.seconds > 0:
        metrics.get("omnimesh_audio_real_time_factor").observe((time.monotonic() - t0) / clock.seconds)
    if done is not None:
        done.usage.audio_seconds = clock.seconds
        yield done
