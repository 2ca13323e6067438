"""Tensor chunks written straight to protobuf wire bytes, and calls that send such bytes as they are.

`encode_tensor` (runtime/tensor_codec.py) builds each chunk's protobuf message, and gRPC serializes it: the payload is
copied four times on the sending thread (the whole tensor to bytes, each chunk sliced out, into the message, out of it
again); at a video's 96 MB of embeddings that is ~0.3 s of a gateway's event loop per hop (bench/gateway/NOTES.md).
`serialized_chunks` writes the very bytes `Outer(field=Tensor(...)).SerializeToString()` gives (fields in number
order, proto3 defaults left out), copying the payload once, from the tensor's own memory. The receiver cannot tell.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch

from runtime.tensor_codec import CHUNK_BYTES, torch_to_pb_dtype, wire_view

_LEN = 2  # wire type of strings, bytes, packed repeated scalars and sub-messages
_VARINT = 0


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field_number: int, wire_type: int) -> bytes:
    return _varint(field_number << 3 | wire_type)


def _int64(value: int) -> int:
    """An int64 as protobuf writes it: negatives as their 64-bit two's complement (ten bytes)."""
    return value & 0xFFFF_FFFF_FFFF_FFFF


def _tensor_head(name: str, dtype: int, shape: tuple[int, ...]) -> bytes:
    """Fields 1-3 of a Tensor (name, dtype, shape), shared by all its chunks."""
    head = bytearray()
    encoded = name.encode()
    if encoded:
        head += _key(1, _LEN) + _varint(len(encoded)) + encoded
    if dtype:
        head += _key(2, _VARINT) + _varint(dtype)
    if shape:
        packed = b"".join(_varint(_int64(s)) for s in shape)
        head += _key(3, _LEN) + _varint(len(packed)) + packed
    return bytes(head)


def serialized_chunks(field_number: int, name: str, t: torch.Tensor,
                      chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The serialized messages that carry `t` in the Tensor field `field_number` of a request or response oneof
    (e.g. VisionRequest.frames = 2): the same chunks, byte for byte, as `encode_tensor` makes."""
    dtype = torch_to_pb_dtype(name, t)
    t = t.detach().cpu().contiguous()  # no copy for a contiguous host tensor
    payload = memoryview(t.view(wire_view(t.dtype)).numpy()).cast("B") if t.numel() else memoryview(b"")
    count = max(1, -(-len(payload) // chunk_bytes))
    head = _tensor_head(name, dtype, tuple(t.shape))
    data_key = _key(4, _LEN)
    for i in range(count):
        data = payload[i * chunk_bytes:(i + 1) * chunk_bytes]  # a view: the join below is the payload's one copy
        tail = bytearray()
        if i:
            tail += _key(5, _VARINT) + _varint(i)
        tail += _key(6, _VARINT) + _varint(count)
        body = (head, data_key + _varint(len(data)) if len(data) else b"", data, bytes(tail))
        size = sum(len(part) for part in body)
        yield b"".join((_key(field_number, _LEN), _varint(size), *body))


def keep_serialized(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A request/response serializer that sends bytes already serialized (from `serialized_chunks`) as they are and
    serializes messages as usual, so one stream can carry both."""

    def serializer(message: Any) -> bytes:
        return message if isinstance(message, bytes) else serialize(message)

    return serializer


def method_path(service: Any, method: str) -> str:
    """The gRPC path of `method` of a service descriptor: /package.Service/Method."""
    return f"/{service.full_name}/{method}"


def payload_bytes(message: Any) -> int:
    """The size of a message on the wire, whether serialized already or not."""
    return len(message) if isinstance(message, bytes) else message.ByteSize()



class TensorChunk(NamedTuple):
    """A Tensor chunk read off the wire without protobuf: `data` a view of the received bytes (the assembler copies
    it once, into the tensor's buffer; a parsed message copied it twice more: into the message, then out of it)."""

    name: str
    dtype: int
    shape: tuple[int, ...]
    data: memoryview
    chunk_index: int
    chunk_count: int
    nbytes: int  # the whole message's size on the wire


class _Unusual(Exception):
    """Bytes the fast reader leaves to protobuf (its own rules then apply: merging, unknown fields, errors)."""


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Unusual
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def read_chunk(data: bytes, field_number: int) -> TensorChunk | None:
    """The Tensor in field `field_number` of a serialized message that holds nothing else, each of its fields once
    (as every sender here writes it); None for any other message, left to the message's own parser."""
    try:
        key, pos = _read_varint(data, 0)
        if key != field_number << 3 | _LEN:
            return None
        size, pos = _read_varint(data, pos)
        if pos + size != len(data):  # another field, or a second message merged after: protobuf's to read
            return None
        fields: dict[int, Any] = {}
        view = memoryview(data)
        while pos < len(data):
            key, pos = _read_varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if number in fields or (number in (1, 3, 4)) != (wire_type == _LEN) or wire_type not in (_LEN, _VARINT):
                raise _Unusual
            if wire_type == _VARINT:
                if not 2 <= number <= 6:
                    raise _Unusual
                fields[number], pos = _read_varint(data, pos)
                continue
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise _Unusual
            fields[number] = view[pos:pos + length]
            pos += length
        shape, at, packed = [], 0, bytes(fields.get(3, b""))
        while at < len(packed):
            value, at = _read_varint(packed, at)
            shape.append(_signed(value, 64))
        return TensorChunk(bytes(fields.get(1, b"")).decode(), _signed(fields.get(2, 0), 32), tuple(shape),
                           fields.get(4, memoryview(b"")), fields.get(5, 0) & 0xFFFF_FFFF,
                           fields.get(6, 0) & 0xFFFF_FFFF, len(data))
    except (_Unusual, UnicodeDecodeError):
        return None


def chunk_or_message(field_number: int, parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """A response deserializer: a Tensor chunk in `field_number` as a TensorChunk, anything else parsed."""

    def deserializer(data: bytes) -> Any:
        return read_chunk(data, field_number) or parse(data)

    return deserializer
