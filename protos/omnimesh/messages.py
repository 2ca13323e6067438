"""What a chat request is made of, as plain Python (messages of text and media parts, sampling), and its protobuf."""
from __future__ import annotations

import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Self

from omnimesh.v1 import common_pb2, omni_pb2


@dataclass(frozen=True)
class Media:
    """Encoded media bytes as a file holds them; `mime_type` may stay empty (the gateway sniffs the bytes)."""

    data: bytes
    mime_type: str = ""

    @classmethod
    def file(cls, path: str | Path, mime_type: str | None = None) -> Self:
        path = Path(path)
        return cls(path.read_bytes(), mime_type or mimetypes.guess_type(path.name)[0] or "")


class Image(Media):
    """JPEG, PNG, WebP or GIF bytes."""


class Audio(Media):
    """WAV, FLAC, OGG, MP3 or M4A bytes."""


class Video(Media):
    """MP4, WebM or MKV bytes."""


Part = str | Image | Audio | Video


@dataclass(frozen=True)
class Message:
    """One turn: `role` is "system", "user" or "assistant"; `content` its ordered parts."""

    role: str
    content: tuple[Part, ...]

    @classmethod
    def user(cls, *content: Part) -> Message:
        return cls("user", content)

    @classmethod
    def system(cls, text: str) -> Message:
        return cls("system", (text,))

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls("assistant", (text,))


# A prompt: one user text, one Message, a {"role", "content"} dict (content a string or a list of parts), or a list.
MessagesLike = str | Message | Mapping | Sequence[Message | Mapping]


@dataclass(frozen=True)
class Sampling:
    """How the text (or, as speech_sampling, the speech) is sampled; None takes the deployment's default.

    The fields are `omnimesh.v1.SamplingParams`'s; the gateway checks them and names a bad one in the error.
    """

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    ignore_eos: bool = False

    def to_pb(self) -> common_pb2.SamplingParams:
        pb = common_pb2.SamplingParams(stop=self.stop, stop_token_ids=self.stop_token_ids, ignore_eos=self.ignore_eos,
                                       logprobs=self.logprobs or self.top_logprobs > 0, top_logprobs=self.top_logprobs)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.default is None and value is not None:
                setattr(pb, f.name, value)
        return pb


@dataclass(frozen=True)
class ChatOptions:
    """Everything of a chat request besides its messages and sampling."""

    speak: bool = False  # also answer in speech (AudioDelta events)
    voice: str = ""  # e.g. "ethan", "chelsie", "aiden"; empty: the deployment's default
    speech_sampling: Sampling = field(default_factory=Sampling)
    return_codes: bool = False  # codec codes with each audio chunk
    use_audio_in_video: bool = False  # hear each video's sound track too
    request_id: str = ""  # echoed in the mesh's logs; the gateway makes one when empty


def to_messages(messages: MessagesLike) -> list[Message]:
    """Any MessagesLike as a list of Message; a wrong shape is a TypeError naming what was given."""
    if isinstance(messages, (str, Message, Mapping)):
        messages = [messages]
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, str):
            m = Message.user(m)
        elif isinstance(m, Mapping):
            content = m.get("content", ())
            m = Message(m.get("role", "user"), (content,) if isinstance(content, (str, Media)) else tuple(content))
        if not isinstance(m, Message):
            raise TypeError(f"messages[{i}] is a {type(m).__name__}; pass a str, a Message or a role/content dict")
        out.append(m)
    return out


def _part_pb(part: Part, where: str) -> omni_pb2.ContentPart:
    if isinstance(part, str):
        return omni_pb2.ContentPart(text=part)
    kind = {Image: "image", Audio: "audio", Video: "video"}.get(type(part))
    if kind is None:
        raise TypeError(f"{where} is a {type(part).__name__}; parts are str, Image, Audio or Video")
    return omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=part.data, mime_type=part.mime_type)})


def chat_request(messages: MessagesLike, sampling: Sampling, options: ChatOptions) -> omni_pb2.ChatRequest:
    msgs = [omni_pb2.Message(role=m.role, content=[_part_pb(p, f"messages[{i}].content[{j}]")
                                                   for j, p in enumerate(m.content)])
            for i, m in enumerate(to_messages(messages))]
    modalities = [omni_pb2.MODALITY_TEXT] + ([omni_pb2.MODALITY_AUDIO] if options.speak else [])
    request = omni_pb2.ChatRequest(request_id=options.request_id, messages=msgs, sampling=sampling.to_pb(),
                                   output_modalities=modalities, voice=options.voice,
                                   return_codes=options.return_codes, use_audio_in_video=options.use_audio_in_video)
    if options.speech_sampling != Sampling():
        request.speech_sampling.CopyFrom(options.speech_sampling.to_pb())
    return request
