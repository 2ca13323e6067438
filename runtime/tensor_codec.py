"""Tensors on the wire: torch <-> omnimesh.v1.Tensor, split into chunks of at most 1 MiB and reassembled."""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

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


def tensor_to_bytes(t: torch.Tensor) -> bytes:
    """Row-major little-endian bytes of a tensor on any device."""
    t = t.detach().contiguous().cpu()
    return t.view(_WIRE_VIEW.get(t.dtype, t.dtype)).numpy().tobytes()


def encode_tensor(name: str, t: torch.Tensor, chunk_bytes: int = CHUNK_BYTES) -> Iterator[common_pb2.Tensor]:
    """The messages that carry `t`: one when it fits in `chunk_bytes`, else chunks of at most `chunk_bytes`."""
    if t.dtype not in _TORCH_TO_PB:
        raise TypeError(f"tensor {name!r} has dtype {t.dtype}, which the wire does not carry")
    data = tensor_to_bytes(t)
    count = max(1, -(-len(data) // chunk_bytes))
    for i in range(count):
        yield common_pb2.Tensor(
            name=name, dtype=_TORCH_TO_PB[t.dtype], shape=list(t.shape),
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
    parts: list[bytes] = field(default_factory=list)
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
            part = _Partial(msg.dtype, shape, count, size)
            self._partial[msg.name] = part
        elif (msg.dtype, tuple(msg.shape), count) != (part.dtype, part.shape, part.count):
            raise InvalidArgument(field_name, "dtype, shape or chunk_count differ between chunks of one tensor")
        elif msg.chunk_index != len(part.parts):
            raise InvalidArgument(field_name, f"chunk {msg.chunk_index} arrived, expected {len(part.parts)}")
        part.received += len(msg.data)
        if part.received > part.size:
            raise InvalidArgument(field_name, f"{part.received} bytes received, shape {list(part.shape)} needs "
                                  f"{part.size}")
        part.parts.append(msg.data)
        if len(part.parts) < part.count:
            return None
        del self._partial[msg.name]
        return msg.name, self._finish(field_name, part)

    def _finish(self, field_name: str, part: _Partial) -> torch.Tensor:
        dtype = _PB_TO_TORCH[part.dtype]
        expected = math.prod(part.shape) * _element_size(dtype)
        data = b"".join(part.parts)
        if len(data) != expected:
            raise InvalidArgument(field_name, f"{len(data)} bytes received, shape {list(part.shape)} needs {expected}")
        wire = _WIRE_VIEW.get(dtype, dtype)
        array = np.frombuffer(data, dtype=torch.empty((), dtype=wire).numpy().dtype)
        return torch.from_numpy(array.copy()).view(dtype).reshape(part.shape)
