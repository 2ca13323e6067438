from omnimesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AudioStart(_message.Message):
    __slots__ = ("request_id", "num_samples")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    num_samples: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., num_samples: _Optional[_Iterable[int]] = ...) -> None: ...

class AudioRequest(_message.Message):
    __slots__ = ("start", "samples")
    START_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    start: AudioStart
    samples: _common_pb2.Tensor
    def __init__(self, start: _Optional[_Union[AudioStart, _Mapping]] = ..., samples: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...

class AudioFinished(_message.Message):
    __slots__ = ("timings",)
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    timings: _common_pb2.Timings
    def __init__(self, timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ...) -> None: ...

class AudioResponse(_message.Message):
    __slots__ = ("embeddings", "finished")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    embeddings: _common_pb2.Tensor
    finished: AudioFinished
    def __init__(self, embeddings: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., finished: _Optional[_Union[AudioFinished, _Mapping]] = ...) -> None: ...
