"""TranscribeStream without a mesh: the settings chunk's checks, the PCM buffer's, and when partials are made (a fake
transcriber that answers with the length of the audio it was given)."""
from __future__ import annotations

import asyncio
import io

import pytest
import soundfile as sf

from omnimesh.v1 import omni_pb2
from runtime.config import SamplingDefaults
from runtime.errors import InvalidArgument
from gateway.service import DoneEvent
from gateway.transcribe import TranscriptEvent
from gateway.transcribe_stream import (PartialEvent, PcmBuffer, pcm16_wav, stream_settings_from_pb,
                                       transcribe_stream)

RATE = 8_000


def first(**config) -> omni_pb2.TranscribeChunk:
    return omni_pb2.TranscribeChunk(config=omni_pb2.TranscribeStreamConfig(**{"sample_rate": RATE, **config}))


@pytest.mark.parametrize("chunk, field", [
    (omni_pb2.TranscribeChunk(pcm16=b"\0\0"), "config"),
    (first(sample_rate=4_000), "config.sample_rate"),
    (first(sample_rate=96_000), "config.sample_rate"),
    (first(partial_every_s=0.2), "config.partial_every_s"),
    (first(partial_every_s=float("nan")), "config.partial_every_s"),
    (first(language="klingon"), "config.language"),
    (first(context="x" * 10_001), "config.context"),
    (first(request_id="r" * 129), "config.request_id"),
])
def test_bad_settings_name_their_field(chunk: omni_pb2.TranscribeChunk, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        stream_settings_from_pb(chunk, SamplingDefaults())
    assert caught.value.violations[0].field == field


def test_good_settings_keep_the_transcribe_fields() -> None:
    settings = stream_settings_from_pb(first(language="de", context="Quilter", partial_every_s=0.5),
                                       SamplingDefaults())
    assert (settings.sample_rate, settings.partial_every_s) == (RATE, 0.5)
    assert settings.job.language == "German" and settings.job.context == "Quilter"


@pytest.mark.parametrize("chunk, index, message", [
    (first(), 1, "first chunk only"),
    (omni_pb2.TranscribeChunk(pcm16=b"\0\0\0"), 1, "whole pairs"),
    (omni_pb2.TranscribeChunk(pcm16=b"\0\0" * (2 * RATE + 1)), 1, "passes 2 s"),
])
def test_bad_chunks_are_refused(chunk: omni_pb2.TranscribeChunk, index: int, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        PcmBuffer(RATE, max_seconds=2.0).add(chunk, index)


def test_pcm_wav_decodes_to_the_same_samples() -> None:
    pcm = bytes(range(200))
    samples, rate = sf.read(io.BytesIO(pcm16_wav(pcm, RATE)), dtype="int16")
    assert rate == RATE and samples.tobytes() == pcm


class LengthTranscriber:
    """Answers each run (whole or partial) with the seconds of audio it was given."""

    def __init__(self) -> None:
        self.runs: list[float] = []

    async def transcribe(self, job, timeout):  # noqa: ANN001 - the TranscribeService call shape
        (audio,) = job.chat.media
        seconds = sf.info(io.BytesIO(audio.data)).duration
        self.runs.append(seconds)
        yield TranscriptEvent("English", f"{seconds:g}")
        yield DoneEvent(0)

    async def transcribe_partial(self, job, pcm16, sample_rate, cache, timeout):  # noqa: ANN001
        seconds = len(pcm16) / 2 / sample_rate
        self.runs.append(seconds)
        yield TranscriptEvent("English", f"{seconds:g}")
        yield DoneEvent(0)


async def paced(pieces: int, seconds: float) -> object:
    for _ in range(pieces):
        await asyncio.sleep(0.02)
        yield omni_pb2.TranscribeChunk(pcm16=b"\0\0" * int(seconds * RATE))


def stream(every: float, pieces: int, piece_s: float) -> tuple[list, list[float]]:
    async def go() -> list:
        fake = LengthTranscriber()
        settings = stream_settings_from_pb(first(partial_every_s=every), SamplingDefaults())
        events = [ev async for ev in transcribe_stream(fake, settings, PcmBuffer(RATE, 60.0),
                                                       paced(pieces, piece_s), lambda: None)]
        return events, fake.runs

    return asyncio.run(go())


def test_a_partial_per_interval_of_new_audio_then_the_whole() -> None:
    events, runs = stream(every=0.5, pieces=6, piece_s=0.25)
    partials = [e for e in events if isinstance(e, PartialEvent)]
    # the last piece ends the stream at once: the whole transcript, not a partial, covers 1.5 s
    assert [p.text for p in partials] == ["0.5", "1"] and runs == [0.5, 1.0, 1.5]
    assert events[len(partials):] == [TranscriptEvent("English", "1.5"), DoneEvent(0)]


def test_without_partials_only_the_whole_is_transcribed() -> None:
    events, runs = stream(every=0.0, pieces=3, piece_s=0.25)
    assert runs == [0.75] and not any(isinstance(e, PartialEvent) for e in events)


def test_a_stream_without_audio_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="no audio arrived"):
        stream(every=0.5, pieces=0, piece_s=0.25)
