"""An OpenAI chat completion request as an omnimesh chat call: messages with media from data URLs, sampling, speech."""
from __future__ import annotations

import base64
import binascii
import re
from typing import Any, NamedTuple

from omnimesh import Audio, Image, Message, Sampling, Video
from omnimesh.messages import Part
from http_front.errors import RequestError
from http_front.schemas import (AudioUrlPart, ChatCompletionRequest, ChatMessage, ImagePart, InputAudioPart, TextPart,
                                VideoPart)

_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*?;base64,(?P<data>.*)", re.DOTALL)


class ChatCall(NamedTuple):
    """What AsyncClient.chat_stream takes: the messages and its keyword arguments."""

    messages: list[Message]
    kwargs: dict[str, Any]


def b64decode(data: str, param: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError("is not valid base64", param) from None


def data_url(url: str, param: str) -> tuple[bytes, str]:
    """The bytes and MIME type of a `data:<mime>;base64,<data>` URL; the front fetches nothing from the network."""
    match = _DATA_URL.fullmatch(url.strip())
    if match is None:
        kind = url.split(":", 1)[0] if ":" in url[:10] else url[:10]
        raise RequestError(f"{param}: only data URLs (data:<mime>;base64,<data>) are accepted, got a {kind!r} URL",
                           param)
    return b64decode(match["data"], param), match["mime"] or ""


def _part(part: Any, param: str) -> Part:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return Image(*data_url(part.image_url.url, f"{param}.image_url.url"))
    if isinstance(part, InputAudioPart):
        mime = f"audio/{part.input_audio.format}" if part.input_audio.format else ""
        return Audio(b64decode(part.input_audio.data, f"{param}.input_audio.data"), mime)
    if isinstance(part, AudioUrlPart):
        return Audio(*data_url(part.audio_url.url, f"{param}.audio_url.url"))
    assert isinstance(part, VideoPart)
    return Video(*data_url(part.video_url.url, f"{param}.video_url.url"))


def to_message(msg: ChatMessage, i: int) -> Message:
    role = "system" if msg.role == "developer" else msg.role
    if msg.content is None:
        return Message(role, ())
    if isinstance(msg.content, str):
        return Message(role, (msg.content,))
    return Message(role, tuple(_part(p, f"messages[{i}].content[{j}]") for j, p in enumerate(msg.content)))


def sampling(req: ChatCompletionRequest) -> Sampling:
    if req.top_logprobs is not None and not req.logprobs:
        raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    return Sampling(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p, seed=req.seed,
                    repetition_penalty=req.repetition_penalty, presence_penalty=req.presence_penalty,
                    frequency_penalty=req.frequency_penalty, stop=stop, ignore_eos=req.ignore_eos,
                    max_tokens=req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens,
                    logprobs=req.logprobs, top_logprobs=req.top_logprobs or 0)


def chat_call(req: ChatCompletionRequest, request_id: str) -> ChatCall:
    if req.n != 1:
        raise RequestError(f"n is {req.n}; this server returns one choice per request (n: 1)", "n")
    speak = "audio" in req.modalities
    if speak and req.audio is None:
        raise RequestError('modalities has "audio": give `audio: {"voice": ..., "format": ...}` too', "audio")
    if speak and req.stream and req.audio.format != "pcm16":
        raise RequestError(f"audio.format is {req.audio.format!r}; streamed audio is 'pcm16'", "audio.format")
    messages = [to_message(m, i) for i, m in enumerate(req.messages)]
    kwargs = {"sampling": sampling(req), "speak": speak, "voice": req.audio.voice if speak else "",
              "use_audio_in_video": req.use_audio_in_video, "request_id": request_id}
    return ChatCall(messages, kwargs)
