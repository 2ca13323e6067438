from omnimesh.v1 import common_pb2 as _common_pb2
from omnimesh.v1 import thinker_pb2 as _thinker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SpeakStart(_message.Message):
    __slots__ = ("request_id", "voice", "prompt_token_ids", "media", "talker_sampling", "code_predictor_sampling", "return_codes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    TALKER_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    CODE_PREDICTOR_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    RETURN_CODES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    voice: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    media: _containers.RepeatedCompositeFieldContainer[_thinker_pb2.MediaSpan]
    talker_sampling: _common_pb2.SamplingParams
    code_predictor_sampling: _common_pb2.SamplingParams
    return_codes: bool
    def __init__(self, request_id: _Optional[str] = ..., voice: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., media: _Optional[_Iterable[_Union[_thinker_pb2.MediaSpan, _Mapping]]] = ..., talker_sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., code_predictor_sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., return_codes: _Optional[bool] = ...) -> None: ...

class TextTokens(_message.Message):
    __slots__ = ("token_ids",)
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class TextEnd(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SpeakRequest(_message.Message):
    __slots__ = ("start", "conditioning", "text", "text_end")
    START_FIELD_NUMBER: _ClassVar[int]
    CONDITIONING_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_END_FIELD_NUMBER: _ClassVar[int]
    start: SpeakStart
    conditioning: _common_pb2.Tensor
    text: TextTokens
    text_end: TextEnd
    def __init__(self, start: _Optional[_Union[SpeakStart, _Mapping]] = ..., conditioning: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., text: _Optional[_Union[TextTokens, _Mapping]] = ..., text_end: _Optional[_Union[TextEnd, _Mapping]] = ...) -> None: ...

class SpeakFinished(_message.Message):
    __slots__ = ("num_frames", "audio_seconds", "finish_reason", "timings")
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    AUDIO_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    num_frames: int
    audio_seconds: float
    finish_reason: _common_pb2.FinishReason
    timings: _common_pb2.Timings
    def __init__(self, num_frames: _Optional[int] = ..., audio_seconds: _Optional[float] = ..., finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ...) -> None: ...

class SpeakResponse(_message.Message):
    __slots__ = ("audio", "finished")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    audio: _common_pb2.AudioChunk
    finished: SpeakFinished
    def __init__(self, audio: _Optional[_Union[_common_pb2.AudioChunk, _Mapping]] = ..., finished: _Optional[_Union[SpeakFinished, _Mapping]] = ...) -> None: ...
