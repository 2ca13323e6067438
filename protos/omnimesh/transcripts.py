"""Transcribe's request and events as plain Python: the language, transcript deltas, the whole transcript, usage, the
end (Qwen3-ASR deployments)."""
from __future__ import annotations

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


TranscriptEvent = Language | TextDelta | Transcript | Usage | Done


@dataclass
class TranscriptReply:
    """A whole transcription, gathered from its events (Client.transcribe / AsyncClient.transcribe)."""

    language: str = ""
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str = ""

    def add(self, event: TranscriptEvent) -> None:
        if isinstance(event, Language):
            self.language = event.language
        elif isinstance(event, TextDelta):
            self.token_ids.extend(event.token_ids)
        elif isinstance(event, Transcript):
            self.language, self.text = event.language, event.text
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Done):
            self.finish_reason = event.finish_reason


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


def transcript_event_from_pb(ev: omni_pb2.TranscribeEvent) -> TranscriptEvent:
    kind = ev.WhichOneof("event")
    if kind == "language":
        return Language(ev.language)
    if kind == "transcript":
        return Transcript(ev.transcript.language, ev.transcript.text)
    as_chat = omni_pb2.ChatEvent()
    getattr(as_chat, kind).CopyFrom(getattr(ev, kind))
    event = event_from_pb(as_chat)
    assert isinstance(event, (TextDelta, Usage, Done)), f"Transcribe sent a {kind} event"
    return event
