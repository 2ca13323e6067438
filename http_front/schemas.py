"""The OpenAI request bodies this front accepts, as pydantic models (unknown fields are ignored, as OpenAI's own
servers ignore fields a model does not use)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Url(_Body):
    url: str


class TextPart(_Body):
    type: Literal["text", "input_text"]
    text: str


class ImagePart(_Body):
    type: Literal["image_url"]
    image_url: Url


class InputAudio(_Body):
    data: str  # base64
    format: str = ""  # "wav", "mp3", ...


class InputAudioPart(_Body):
    type: Literal["input_audio"]
    input_audio: InputAudio


class AudioUrlPart(_Body):
    type: Literal["audio_url"]
    audio_url: Url


class VideoPart(_Body):
    type: Literal["video_url"]
    video_url: Url


ContentPart = Annotated[TextPart | ImagePart | InputAudioPart | AudioUrlPart | VideoPart, Field(discriminator="type")]


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


class AudioOutput(_Body):
    voice: str = ""
    format: Literal["wav", "pcm16", "mp3", "flac", "opus", "aac"] = "wav"


class StreamOptions(_Body):
    include_usage: bool = False


class ChatCompletionRequest(_Body):
    model: str = ""
    messages: list[ChatMessage] = Field(min_length=1)
    modalities: list[Literal["text", "audio"]] = ["text"]
    audio: AudioOutput | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    # Beyond OpenAI's fields, as vLLM spells them (the SDK sends them through `extra_body`).
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    use_audio_in_video: bool = False


class SpeechRequest(_Body):
    model: str = ""
    input: str = Field(min_length=1)
    voice: str = ""
    response_format: Literal["wav", "pcm", "mp3", "flac", "opus", "aac"] = "mp3"
    speed: float = 1.0
    instructions: str = ""
    stream_format: Literal["audio", "sse"] = "audio"
    max_tokens: int | None = None  # of the text read aloud (beyond OpenAI's fields; the deployment's default if unset)
