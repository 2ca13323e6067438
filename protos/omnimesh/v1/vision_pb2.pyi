from omnimesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VisionItem(_message.Message):
    __slots__ = ("is_video", "grid_thw")
    IS_VIDEO_FIELD_NUMBER: _ClassVar[int]
    GRID_THW_FIELD_NUMBER: _ClassVar[int]
    is_video: bool
    grid_thw: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, is_video: _Optional[bool] = ..., grid_thw: _Optional[_Iterable[int]] = ...) -> None: ...

class VisionStart(_message.Message):
    __slots__ = ("request_id", "items")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    items: _containers.RepeatedCompositeFieldContainer[VisionItem]
    def __init__(self, request_id: _Optional[str] = ..., items: _Optional[_Iterable[_Union[VisionItem, _Mapping]]] = ...) -> None: ...

class VisionRequest(_message.Message):
    __slots__ = ("start", "frames")
    START_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    start: VisionStart
    frames: _common_pb2.Tensor
    def __init__(self, start: _Optional[_Union[VisionStart, _Mapping]] = ..., frames: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ...) -> None: ...

class VisionFinished(_message.Message):
    __slots__ = ("timings",)
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    timings: _common_pb2.Timings
    def __init__(self, timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ...) -> None: ...

class VisionResponse(_message.Message):
    __slots__ = ("embeddings", "finished")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    embeddings: _common_pb2.Tensor
    finished: VisionFinished
    def __init__(self, embeddings: _Optional[_Union[_common_pb2.Tensor, _Mapping]] = ..., finished: _Optional[_Union[VisionFinished, _Mapping]] = ...) -> None: ...
