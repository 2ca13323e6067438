"""Transcribe's request and events as plain Python: the language, transcript deltas, the whole transcript, usage, the
end (Qwen3-ASR deployments)."""
from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omnimesh.events import Done, TextDelta, Usage, event_from_pb
from omnimesh.messages import Audio, Sampling
from omnimesh.v1 import omni_pb2


@dataclass(frozen=True)
class Language:
    """The transcript's language, before any text: forced, or as the model named it; "" when it heard no speech."""

    language: str


@dataclass(frozen=True)
class Transcript:
    """The whole transcript, after the last delta."""

    language: str
    text: str


@dataclass(frozen=True)
class Partial:
    """transcribe_pcm_stream only, while audio is sent: the transcript of the audio so far (later ones may revise
    it; the final Transcript is the one a whole-file transcription gives)."""

    language: str
    text: str


TranscriptEvent = Language | TextDelta | Transcript | Partial | Usage | Done


@dataclass
class TranscriptReply:
    """A whole transcription, gathered from its events (Client.transcribe / AsyncClient.transcribe)."""

    language: str = ""
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str = ""
    partials: list[Partial] = field(default_factory=list)
    timing: Mapping[str, float] = field(default_factory=dict)  # Done.timing

    def add(self, event: TranscriptEvent) -> None:
        if isinstance(event, Partial):
            self.partials.append(event)
        elif isinstance(event, Language):
            self.language = event.language
        elif isinstance(event, TextDelta):
            self.token_ids.extend(event.token_ids)
        elif isinstance(event, Transcript):
            self.language, self.text = event.language, event.text
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Done):
            self.finish_reason, self.timing = event.finish_reason, event.timing


def transcribe_request(audio: Audio | bytes | str | Path, language: str, context: str, sampling: Sampling,
                       request_id: str) -> omni_pb2.TranscribeRequest:
    """`audio`: an Audio, a file's bytes, or a path to read."""
    if isinstance(audio, (str, Path)):
        audio = Audio.file(audio)
    elif isinstance(audio, bytes):
        audio = Audio(audio)
    media = omni_pb2.Media(data=audio.data, mime_type=audio.mime_type)
    return omni_pb2.TranscribeRequest(request_id=request_id, audio=media, language=language, context=context,
                                      sampling=sampling.to_pb())


def stream_config(sample_rate: int, language: str, context: str, sampling: Sampling, partial_every_s: float,
                  request_id: str) -> omni_pb2.TranscribeChunk:
    """The first chunk of a TranscribeStream: its settings."""
    config = omni_pb2.TranscribeStreamConfig(request_id=request_id, language=language, context=context,
                                             sampling=sampling.to_pb(), sample_rate=sample_rate,
                                             partial_every_s=partial_every_s)
    return omni_pb2.TranscribeChunk(config=config)


def pcm_chunks(first: omni_pb2.TranscribeChunk, pcm: Iterable[bytes]) -> Iterator[omni_pb2.TranscribeChunk]:
    yield first
    for pcm16 in pcm:
        yield omni_pb2.TranscribeChunk(pcm16=pcm16)


async def pcm_chunks_async(first: omni_pb2.TranscribeChunk,
                           pcm: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[omni_pb2.TranscribeChunk]:
    """As pcm_chunks, from PCM that is itself produced asynchronously (a recording) or not."""
    yield first
    if isinstance(pcm, AsyncIterable):
        async for pcm16 in pcm:
            yield omni_pb2.TranscribeChunk(pcm16=pcm16)
    else:
        for pcm16 in pcm:
            yield omni_pb2.TranscribeChunk(pcm16=pcm16)


def transcript_event_from_pb(ev: omni_pb2.TranscribeEvent) -> TranscriptEvent:
    kind = ev.WhichOneof("event")
    if kind == "language":
        return Language(ev.language)
    if kind == "transcript":
        return Transcript(ev.transcript.language, ev.transcript.text)
    if kind == "partial":
        return Partial(ev.partial.language, ev.partial.text)
    as_chat = omni_pb2.ChatEvent()
    getattr(as_chat, kind).CopyFrom(getattr(ev, kind))
    event = event_from_pb(as_chat)
    assert isinstance(event, (TextDelta, Usage, Done)), f"Transcribe sent a {kind} event"
    return event
