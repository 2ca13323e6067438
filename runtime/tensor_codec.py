"""Tensors on the wire: torch <-> omnimesh.v1.Tensor, split into chunks of at most 1 MiB and reassembled."""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from omnimesh.v1 import common_pb2
from runtime.errors import InvalidArgument

CHUNK_BYTES = 1 << 20  # measured ~5x faster than one big message (docs/grpc-transport.md)

_TORCH_TO_PB = {
    torch.float32: common_pb2.DTYPE_FLOAT32,
    torch.float16: common_pb2.DTYPE_FLOAT16,
    torch.bfloat16: common_pb2.DTYPE_BFLOAT16,
    torch.int64: common_pb2.DTYPE_INT64,
    torch.int32: common_pb2.DTYPE_INT32,
    torch.int16: common_pb2.DTYPE_INT16,
    torch.uint8: common_pb2.DTYPE_UINT8,
}
_PB_TO_TORCH = {v: k for k, v in _TORCH_TO_PB.items()}
# numpy has no bfloat16: its bytes travel as int16 and are viewed back as bfloat16 in torch.
_WIRE_VIEW = {torch.bfloat16: torch.int16}


def wire_view(dtype: torch.dtype) -> torch.dtype:
    """The dtype whose numpy counterpart carries `dtype`'s bytes (bfloat16 travels as int16)."""
    return _WIRE_VIEW.get(dtype, dtype)


def torch_to_pb_dtype(name: str, t: torch.Tensor) -> int:
    """The wire's DType of `t`; TypeError naming the tensor for one the wire does not carry."""
    if t.dtype not in _TORCH_TO_PB:
        raise TypeError(f"tensor {name!r} has dtype {t.dtype}, which the wire does not carry")
    return _TORCH_TO_PB[t.dtype]


def tensor_to_bytes(t: torch.Tensor) -> bytes:
    """Row-major little-endian bytes of a tensor on any device."""
    t = t.detach().contiguous().cpu()
    return t.view(wire_view(t.dtype)).numpy().tobytes()


def encode_tensor(name: str, t: torch.Tensor, chunk_bytes: int = CHUNK_BYTES) -> Iterator[common_pb2.Tensor]:
    """The messages that carry `t`: one when it fits in `chunk_bytes`, else chunks of at most `chunk_bytes`.
    (runtime/tensor_wire.py writes the same chunks as serialized bytes with one copy of the payload, for hot paths.)"""
    dtype = torch_to_pb_dtype(name, t)
    data = tensor_to_bytes(t)
    count = max(1, -(-len(data) // chunk_bytes))
    for i in range(count):
        yield common_pb2.Tensor(
            name=name, dtype=dtype, shape=list(t.shape),
            data=data[i * chunk_bytes:(i + 1) * chunk_bytes], chunk_index=i, chunk_count=count,
        )


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass
class _Partial:
    dtype: int
    shape: tuple[int, ...]
    count: int
    size: int  # bytes the shape needs: chunks past it are refused as they come, not buffered
    # The whole tensor's bytes, allocated at the first chunk (the size is checked by then) and filled as chunks come:
    # one copy of each chunk, where joining the chunks and copying the join out took two more of the payload.
    out: torch.Tensor
    chunks: int = 0
    received: int = 0


class TensorAssembler:
    """Collects chunks by name and returns each tensor once its last chunk arrives.

    Chunks of one tensor must arrive in order; anything inconsistent is an InvalidArgument naming `field`,
    so a bad peer gets a clear error rather than a corrupt tensor.
    """

    def __init__(self, field_name: str, max_bytes: int = 8 << 30) -> None:
        self._field = field_name
        self._max_bytes = max_bytes
        self._partial: dict[str, _Partial] = {}

    @property
    def pending(self) -> list[str]:
        """Names of tensors with chunks still missing."""
        return sorted(self._partial)

    def add(self, msg: common_pb2.Tensor) -> tuple[str, torch.Tensor] | None:
        field_name = f"{self._field}[{msg.name}]"
        if msg.dtype not in _PB_TO_TORCH:
            raise InvalidArgument(field_name, f"dtype {msg.dtype} is not one of {sorted(_PB_TO_TORCH)}")
        count = max(1, msg.chunk_count)
        part = self._partial.get(msg.name)
        if part is None:
            if msg.chunk_index != 0:
                raise InvalidArgument(field_name, f"first chunk has chunk_index {msg.chunk_index}, expected 0")
            shape = tuple(int(s) for s in msg.shape)
            if any(s < 0 for s in shape):
                raise InvalidArgument(field_name, f"shape {list(shape)} has a negative dimension")
            size = math.prod(shape) * _element_size(_PB_TO_TORCH[msg.dtype])  # Python ints: never wraps around
            if size > self._max_bytes:  # refuse before buffering anything
                raise InvalidArgument(field_name, f"{size} bytes exceed the limit of {self._max_bytes}")
            if count > max(1, size):  # empty chunks without end would cost memory and never finish
                raise InvalidArgument(field_name, f"chunk_count {count} exceeds the {size} bytes of its shape")
            part = _Partial(msg.dtype, shape, count, size, torch.empty(size, dtype=torch.uint8))
            self._partial[msg.name] = part
        elif (msg.dtype, tuple(msg.shape), count) != (part.dtype, part.shape, part.count):
            raise InvalidArgument(field_name, "dtype, shape or chunk_count differ between chunks of one tensor")
        elif msg.chunk_index != part.chunks:
            raise InvalidArgument(field_name, f"chunk {msg.chunk_index} arrived, expected {part.chunks}")
        data = msg.data  # upb makes a new bytes object on every read of the field: read it once
        start = part.received
        part.received += len(data)
        if part.received > part.size:
            raise InvalidArgument(field_name, f"{part.received} bytes received, shape {list(part.shape)} needs "
                                  f"{part.size}")
        if data:
            part.out.numpy()[start:part.received] = np.frombuffer(data, dtype=np.uint8)
        part.chunks += 1
        if part.chunks < part.count:
            return None
        del self._partial[msg.name]
        return msg.name, self._finish(field_name, part)

    def _finish(self, field_name: str, part: _Partial) -> torch.Tensor:
        if part.received != part.size:
            raise InvalidArgument(field_name, f"{part.received} bytes received, shape {list(part.shape)} needs "
                                  f"{part.size}")
        return part.out.view(_PB_TO_TORCH[part.dtype]).reshape(part.shape)
