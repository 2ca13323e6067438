from omnimesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Modality(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODALITY_UNSPECIFIED: _ClassVar[Modality]
    MODALITY_TEXT: _ClassVar[Modality]
    MODALITY_AUDIO: _ClassVar[Modality]
MODALITY_UNSPECIFIED: Modality
MODALITY_TEXT: Modality
MODALITY_AUDIO: Modality

class Media(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image", "audio", "video")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: Media
    audio: Media
    video: Media
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[Media, _Mapping]] = ..., audio: _Optional[_Union[Media, _Mapping]] = ..., video: _Optional[_Union[Media, _Mapping]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    def __init__(self, role: _Optional[str] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ...) -> None: ...

class ChatRequest(_message.Message):
    __slots__ = ("request_id", "messages", "sampling", "output_modalities", "voice", "return_codes", "use_audio_in_video", "speech_sampling")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    RETURN_CODES_FIELD_NUMBER: _ClassVar[int]
    USE_AUDIO_IN_VIDEO_FIELD_NUMBER: _ClassVar[int]
    SPEECH_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    sampling: _common_pb2.SamplingParams
    output_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    voice: str
    return_codes: bool
    use_audio_in_video: bool
    speech_sampling: _common_pb2.SamplingParams
    def __init__(self, request_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., output_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ..., voice: _Optional[str] = ..., return_codes: _Optional[bool] = ..., use_audio_in_video: _Optional[bool] = ..., speech_sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text", "token_ids", "logprobs")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class Done(_message.Message):
    __slots__ = ("finish_reason",)
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    finish_reason: _common_pb2.FinishReason
    def __init__(self, finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "stage")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    stage: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., stage: _Optional[str] = ...) -> None: ...

class ChatEvent(_message.Message):
    __slots__ = ("sequence", "text", "audio", "usage", "done", "error", "reasoning")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    text: TextDelta
    audio: _common_pb2.AudioChunk
    usage: _common_pb2.Usage
    done: Done
    error: Error
    reasoning: TextDelta
    def __init__(self, sequence: _Optional[int] = ..., text: _Optional[_Union[TextDelta, _Mapping]] = ..., audio: _Optional[_Union[_common_pb2.AudioChunk, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., done: _Optional[_Union[Done, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., reasoning: _Optional[_Union[TextDelta, _Mapping]] = ...) -> None: ...

class OmniInfo(_message.Message):
    __slots__ = ("gateway", "stages", "input_modalities", "output_modalities", "voices", "model_family")
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    INPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FAMILY_FIELD_NUMBER: _ClassVar[int]
    gateway: _common_pb2.StageInfo
    stages: _containers.RepeatedCompositeFieldContainer[_common_pb2.StageInfo]
    input_modalities: _containers.RepeatedScalarFieldContainer[str]
    output_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    voices: _containers.RepeatedScalarFieldContainer[str]
    model_family: str
    def __init__(self, gateway: _Optional[_Union[_common_pb2.StageInfo, _Mapping]] = ..., stages: _Optional[_Iterable[_Union[_common_pb2.StageInfo, _Mapping]]] = ..., input_modalities: _Optional[_Iterable[str]] = ..., output_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ..., voices: _Optional[_Iterable[str]] = ..., model_family: _Optional[str] = ...) -> None: ...

class TranscribeRequest(_message.Message):
    __slots__ = ("request_id", "audio", "language", "context", "sampling")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    audio: Media
    language: str
    context: str
    sampling: _common_pb2.SamplingParams
    def __init__(self, request_id: _Optional[str] = ..., audio: _Optional[_Union[Media, _Mapping]] = ..., language: _Optional[str] = ..., context: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ...) -> None: ...

class TranscribeStreamConfig(_message.Message):
    __slots__ = ("request_id", "language", "context", "sampling", "sample_rate", "partial_every_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_EVERY_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    language: str
    context: str
    sampling: _common_pb2.SamplingParams
    sample_rate: int
    partial_every_s: float
    def __init__(self, request_id: _Optional[str] = ..., language: _Optional[str] = ..., context: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., sample_rate: _Optional[int] = ..., partial_every_s: _Optional[float] = ...) -> None: ...

class TranscribeChunk(_message.Message):
    __slots__ = ("config", "pcm16")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PCM16_FIELD_NUMBER: _ClassVar[int]
    config: TranscribeStreamConfig
    pcm16: bytes
    def __init__(self, config: _Optional[_Union[TranscribeStreamConfig, _Mapping]] = ..., pcm16: _Optional[bytes] = ...) -> None: ...

class Transcript(_message.Message):
    __slots__ = ("language", "text")
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    language: str
    text: str
    def __init__(self, language: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class TranscribeEvent(_message.Message):
    __slots__ = ("sequence", "language", "text", "transcript", "usage", "done", "error", "partial")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    language: str
    text: TextDelta
    transcript: Transcript
    usage: _common_pb2.Usage
    done: Done
    error: Error
    partial: Transcript
    def __init__(self, sequence: _Optional[int] = ..., language: _Optional[str] = ..., text: _Optional[_Union[TextDelta, _Mapping]] = ..., transcript: _Optional[_Union[Transcript, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., done: _Optional[_Union[Done, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., partial: _Optional[_Union[Transcript, _Mapping]] = ...) -> None: ...
