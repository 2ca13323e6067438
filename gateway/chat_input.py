"""A validated chat request in domain form (protobuf stops at the servicer)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from omnimesh.v1 import common_pb2, omni_pb2
from runtime.config import SamplingDefaults
from runtime.engine.sampling_params import SamplingOptions
from runtime.errors import InvalidArgument, preview
from runtime.sampling import check_speech_sampling, resolve_sampling

ROLES = ("system", "user", "assistant")
MEDIA_KINDS = ("image", "audio", "video")
# Caps on what one request holds, checked before any of it is used (documented on ChatRequest in omni.proto); the
# request's bytes are capped as a whole by gateway.server.max_message_bytes.
MAX_REQUEST_ID_CHARS = 128
MAX_MESSAGES = 1024
MAX_PARTS = 256  # content parts of one message
MAX_MEDIA_ITEMS = 64  # images, audio clips and videos of the whole request
MAX_TEXT_CHARS = 1 << 20  # all text parts together: 16 per token of the released model's 65,536-token context
MAX_MIME_TYPE_CHARS = 128
MAX_VOICE_CHARS = 64
MAX_OUTPUT_MODALITIES = 2


@dataclass(frozen=True)
class MediaBytes:
    kind: str  # image | audio | video
    data: bytes
    mime_type: str
    field: str  # where it sits in the request, for error messages: messages[0].content[1].image


@dataclass(frozen=True)
class Turn:
    role: str
    parts: tuple[str | MediaBytes, ...]  # text or media, in order


@dataclass(frozen=True)
class ChatInput:
    request_id: str
    turns: tuple[Turn, ...]
    sampling: SamplingOptions
    want_audio: bool
    voice: str
    return_codes: bool
    use_audio_in_video: bool
    speech_sampling: common_pb2.SamplingParams | None = None  # fields set checked; the talker owns the defaults
    continue_final: bool = False  # the prompt ends inside the last (assistant) turn, which the model continues
    special_tokens: bool = False  # text spelling a special token becomes it (a key of gateway.special_token_api_keys)

    @property
    def media(self) -> list[MediaBytes]:
        return [p for t in self.turns for p in t.parts if isinstance(p, MediaBytes)]


def chat_input_from_pb(req: omni_pb2.ChatRequest, defaults: SamplingDefaults) -> ChatInput:
    """Validates every field a client controls; each error names the field, the problem and what is allowed, and
    echoes at most a short prefix of what was sent."""
    _check_sizes(req)
    turns = tuple(_turn(i, m) for i, m in enumerate(req.messages))
    modalities = set(req.output_modalities) or {omni_pb2.MODALITY_TEXT}
    if not modalities <= {omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO}:
        raise InvalidArgument("output_modalities", f"holds {sorted(modalities)}; use MODALITY_TEXT (1) and/or "
                              "MODALITY_AUDIO (2)")
    if req.HasField("speech_sampling"):
        check_speech_sampling(req.speech_sampling)
    return ChatInput(
        request_id=req.request_id or uuid.uuid4().hex,
        turns=turns,
        sampling=resolve_sampling(req.sampling, defaults),
        want_audio=omni_pb2.MODALITY_AUDIO in modalities,
        voice=req.voice,
        return_codes=req.return_codes,
        use_audio_in_video=req.use_audio_in_video,
        speech_sampling=req.speech_sampling if req.HasField("speech_sampling") else None,
    )


def _check_sizes(req: omni_pb2.ChatRequest) -> None:
    """Every string and repeated field against its cap, counts before contents."""
    caps = [
        ("request_id", len(req.request_id), MAX_REQUEST_ID_CHARS, "characters"),
        ("voice", len(req.voice), MAX_VOICE_CHARS, "characters"),
        ("output_modalities", len(req.output_modalities), MAX_OUTPUT_MODALITIES, "entries"),
        ("messages", len(req.messages), MAX_MESSAGES, "messages"),
    ]
    for i, msg in enumerate(req.messages):
        caps.append((f"messages[{i}].content", len(msg.content), MAX_PARTS, "parts"))
    for field, size, cap, unit in caps:
        if size > cap:
            raise InvalidArgument(field, f"has {size} {unit}; at most {cap}")
    if not req.messages:
        raise InvalidArgument("messages", "is empty; send at least one message")
    num_media = num_chars = 0
    for i, msg in enumerate(req.messages):
        for j, part in enumerate(msg.content):
            kind = part.WhichOneof("part")
            if kind == "text":
                num_chars += len(part.text)
            elif kind is not None:
                num_media += 1
                mime = getattr(part, kind).mime_type
                if len(mime) > MAX_MIME_TYPE_CHARS:
                    raise InvalidArgument(f"messages[{i}].content[{j}].{kind}.mime_type",
                                          f"has {len(mime)} characters; at most {MAX_MIME_TYPE_CHARS}")
    if num_chars > MAX_TEXT_CHARS:
        raise InvalidArgument("messages", f"hold {num_chars} characters of text; at most {MAX_TEXT_CHARS} in all")
    if num_media > MAX_MEDIA_ITEMS:
        raise InvalidArgument("messages", f"hold {num_media} media items; at most {MAX_MEDIA_ITEMS} in all")


def _turn(i: int, msg: omni_pb2.Message) -> Turn:
    field = f"messages[{i}]"
    if msg.role not in ROLES:
        raise InvalidArgument(f"{field}.role", f"is {preview(msg.role)}; must be one of {', '.join(ROLES)}")
    if not msg.content:
        raise InvalidArgument(f"{field}.content", "is empty; a message needs at least one content part")
    parts: list[str | MediaBytes] = []
    for j, part in enumerate(msg.content):
        kind = part.WhichOneof("part")
        where = f"{field}.content[{j}]"
        if kind is None:
            raise InvalidArgument(where, "sets none of text, image, audio, video")
        if kind == "text":
            parts.append(part.text)
            continue
        media = getattr(part, kind)
        if not media.data:
            raise InvalidArgument(f"{where}.{kind}.data", "is empty; send the file's bytes")
        parts.append(MediaBytes(kind, media.data, media.mime_type, f"{where}.{kind}"))
    if all(isinstance(p, str) and not p for p in parts):
        raise InvalidArgument(f"{field}.content", "holds only empty text")
    return Turn(msg.role, tuple(parts))
