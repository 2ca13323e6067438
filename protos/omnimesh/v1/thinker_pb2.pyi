from omnimesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MediaKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEDIA_KIND_UNSPECIFIED: _ClassVar[MediaKind]
    MEDIA_KIND_IMAGE: _ClassVar[MediaKind]
    MEDIA_KIND_VIDEO: _ClassVar[MediaKind]
    MEDIA_KIND_AUDIO: _ClassVar[MediaKind]
    MEDIA_KIND_AUDIO_IN_VIDEO: _ClassVar[MediaKind]
MEDIA_KIND_UNSPECIFIED: MediaKind
MEDIA_KIND_IMAGE: MediaKind
MEDIA_KIND_VIDEO: MediaKind
MEDIA_KIND_AUDIO: MediaKind
MEDIA_KIND_AUDIO_IN_VIDEO: MediaKind

class CacheEventsRequest(_message.Message):
    __slots__ = ("interval_ms",)
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    interval_ms: int
    def __init__(self, interval_ms: _Optional[int] = ...) -> None: ...

class ReplicaLoad(_message.Message):
    __slots__ = ("running", "waiting", "kv_usage")
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_USAGE_FIELD_NUMBER: _ClassVar[int]
    running: int
    waiting: int
    kv_usage: float
    def __init__(self, running: _Optional[int] = ..., waiting: _Optional[int] = ..., kv_usage: _Optional[float] = ...) -> None: ...

class CacheEvent(_message.Message):
    __slots__ = ("snapshot", "stored", "evicted", "load", "block_size", "prefix_cache", "needs_state", "states_stored", "states_evicted")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_FIELD_NUMBER: _ClassVar[int]
    NEEDS_STATE_FIELD_NUMBER: _ClassVar[int]
    STATES_STORED_FIELD_NUMBER: _ClassVar[int]
    STATES_EVICTED_FIELD_NUMBER: _ClassVar[int]
    snapshot: bool
    stored: _containers.RepeatedScalarFieldContainer[bytes]
    evicted: _containers.RepeatedScalarFieldContainer[bytes]
    load: ReplicaLoad
    block_size: int
    prefix_cache: bool
    needs_state: bool
    states_stored: _containers.RepeatedScalarFieldContainer[bytes]
    states_evicted: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, snapshot: _Optional[bool] = ..., stored: _Optional[_Iterable[bytes]] = ..., evicted: _Optional[_Iterable[bytes]] = ..., load: _Optional[_Union[ReplicaLoad, _Mapping]] = ..., block_size: _Optional[int] = ..., prefix_cache: _Optional[bool] = ..., needs_state: _Optional[bool] = ..., states_stored: _Optional[_Iterable[bytes]] = ..., states_evicted: _Optional[_Iterable[bytes]] = ...) -> None: ...

class MediaSpan(_message.Message):
    __slots__ = ("kind", "offset", "length", "grid_thw", "second_per_grid", "content_hash", "audio_length")
    KIND_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    GRID_THW_FIELD_NUMBER: _ClassVar[int]
    SECOND_PER_GRID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    AUDIO_LENGTH_FIELD_NUMBER: _ClassVar[int]
    kind: MediaKind
    offset: int
    length: int
    grid_thw: _containers.RepeatedScalarFieldContainer[int]
    second_per_grid: float
    content_hash: str
    audio_length: int
    def __init__(self, kind: _Optional[_Union[MediaKind, str]] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., grid_thw: _Optional[_Iterable[int]] = ..., second_per_grid: _Optional[float] = ..., content_hash: _Optional[str] = ..., audio_length: _Optional[int] = ...) -> None: ...

class GenerateStart(_message.Message):
    __slots__ = ("request_id", "token_ids", "media", "sampling", "use_audio_in_video", "return_talker_conditioning")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    USE_AUDIO_IN_VIDEO_FIELD_NUMBER: _ClassVar[int]
    RETURN_TALKER_CONDITIONING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    media: _containers.RepeatedCompositeFieldContainer[MediaSpan]
    sampling: _common_pb2.SamplingParams
    use_audio_in_video: bool
    return_talker_conditioning: bool
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., media: _Optional[_Iterable[_Union[MediaSpan, _Mapping]]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., use_audio_in_video: _Optional[bool] = ..., return_talker_conditioning: _Optional[bool] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("start", "media")
    START_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    start: GenerateStart
    media: _common_pb2.Tensor
    def __init__(self, start: _Optional[_Union[GenerateStart, _Mapping]] = ..., media: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...

class TokenBatch(_message.Message):
    __slots__ = ("token_ids", "text", "logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class GenerateFinished(_message.Message):
    __slots__ = ("finish_reason", "usage", "timings")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    finish_reason: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    timings: _common_pb2.Timings
    def __init__(self, finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("tokens", "talker_conditioning", "finished")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TALKER_CONDITIONING_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    tokens: TokenBatch
    talker_conditioning: _common_pb2.Tensor
    finished: GenerateFinished
    def __init__(self, tokens: _Optional[_Union[TokenBatch, _Mapping]] = ..., talker_conditioning: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., finished: _Optional[_Union[GenerateFinished, _Mapping]] = ...) -> None: ...
