"""Tensor chunks written as wire bytes are, byte for byte, what the protobuf messages of `encode_tensor` serialize
to, and reassemble to the tensor sent."""
from __future__ import annotations

import pytest
import torch

from omnimesh.v1 import audio_pb2, common_pb2, thinker_pb2, vision_pb2
from runtime.tensor_codec import TensorAssembler, encode_tensor
from runtime.tensor_wire import (chunk_or_message, keep_serialized, method_path, payload_bytes, read_chunk,
                                 serialized_chunks)

CASES = [
    ("item.0", torch.randint(0, 256, (3, 32, 48, 3), dtype=torch.uint8), 1000),
    ("media.0.embeddings", torch.randn(300, 64).to(torch.bfloat16), 4096),
    ("clip.0", torch.randn(16_000), 1 << 20),  # one chunk
    ("many", torch.arange(70_000, dtype=torch.int64), 3000),  # 187 chunks: two-byte varints
    ("odd", torch.arange(1001, dtype=torch.int16), 333),  # the last chunk shorter
    ("empty", torch.empty(0, 5, dtype=torch.float16), 1 << 20),
    ("", torch.ones(2, 2, dtype=torch.int32), 1 << 20),  # proto3 leaves the empty name out
    ("naïve-名前", torch.ones(4, dtype=torch.float32), 8),
    ("strided", torch.arange(60, dtype=torch.float32).view(6, 10)[:, ::2], 16),
]


@pytest.mark.parametrize(("name", "t", "chunk"), CASES, ids=[c[0] or "unnamed" for c in CASES])
@pytest.mark.parametrize(("message", "field"), [(vision_pb2.VisionRequest, "frames"),
                                                (thinker_pb2.GenerateRequest, "media"),
                                                (audio_pb2.AudioRequest, "samples")])
def test_same_bytes_as_the_protobuf_messages(name: str, t: torch.Tensor, chunk: int, message: type,
                                             field: str) -> None:
    number = message.DESCRIPTOR.fields_by_name[field].number
    ours = list(serialized_chunks(number, name, t, chunk))
    reference = [message(**{field: c}).SerializeToString() for c in encode_tensor(name, t, chunk)]
    assert ours == reference


@pytest.mark.parametrize(("name", "t", "chunk"), CASES, ids=[c[0] or "unnamed" for c in CASES])
def test_reassembles_to_the_tensor_sent(name: str, t: torch.Tensor, chunk: int) -> None:
    assembler = TensorAssembler("frames")
    done = [assembler.add(vision_pb2.VisionRequest.FromString(b).frames) for b in serialized_chunks(2, name, t, chunk)]
    assert all(d is None for d in done[:-1]) and done[-1][0] == name
    out = done[-1][1]
    assert out.dtype == t.dtype and out.shape == t.shape and torch.equal(out, t)


def test_a_tensor_the_wire_does_not_carry_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="'x' has dtype torch.float64"):
        next(serialized_chunks(2, "x", torch.zeros(2, dtype=torch.float64)))


def test_keep_serialized_passes_bytes_and_serializes_messages() -> None:
    serialize = keep_serialized(vision_pb2.VisionRequest.SerializeToString)
    start = vision_pb2.VisionRequest(start=vision_pb2.VisionStart(request_id="r"))
    assert serialize(b"\x12\x00") == b"\x12\x00"
    assert serialize(start) == start.SerializeToString()
    assert payload_bytes(b"abc") == 3 and payload_bytes(start) == start.ByteSize()


def test_method_path() -> None:
    assert method_path(vision_pb2.DESCRIPTOR.services_by_name["Vision"], "Encode") == "/omnimesh.v1.Vision/Encode"


@pytest.mark.parametrize(("name", "t", "chunk"), CASES, ids=[c[0] or "unnamed" for c in CASES])
def test_read_chunk_reads_what_protobuf_reads(name: str, t: torch.Tensor, chunk: int) -> None:
    for wire in serialized_chunks(1, name, t, chunk):
        ours, reference = read_chunk(wire, 1), vision_pb2.VisionResponse.FromString(wire).embeddings
        assert ours is not None and ours.nbytes == len(wire)
        assert (ours.name, ours.dtype, ours.shape, bytes(ours.data), ours.chunk_index, ours.chunk_count) == (
            reference.name, reference.dtype, tuple(reference.shape), reference.data, reference.chunk_index,
            reference.chunk_count)


def test_read_chunk_reassembles_like_the_message() -> None:
    t = torch.randn(700, 48).to(torch.bfloat16)
    assembler = TensorAssembler("vision.embeddings")
    done = [assembler.add(read_chunk(w, 1)) for w in serialized_chunks(1, "item.0.merged", t, 4096)]
    assert torch.equal(done[-1][1], t)


def _tensor(**fields: object) -> bytes:
    return vision_pb2.VisionResponse(embeddings=common_pb2.Tensor(**fields)).SerializeToString()


@pytest.mark.parametrize("wire", [
    vision_pb2.VisionResponse(finished=vision_pb2.VisionFinished()).SerializeToString(),  # another oneof member
    _tensor(name="a", data=b"xy") + _tensor(chunk_index=1),  # two messages merged: protobuf's merge rules
    _tensor(name="a", data=b"xy") + b"\x08\x01",  # a field after the chunk
    _tensor(name="a", data=b"xy")[:-1],  # truncated
    b"\x0a\x04\x0a\x02\xff\xfe",  # a name that is not UTF-8
    b"\x0a\x04\x3a\x02ab",  # an unknown field (7) in the chunk
    b"\x0a\x04\x18\x01\x18\x02",  # shape not packed (two varints)
    b"\x0a\x04\x28\x01\x28\x02",  # chunk_index twice
    b"\x0a\x02\x10",  # a varint cut short
], ids=["finished", "merged", "trailing", "truncated", "not-utf8", "unknown-field", "unpacked", "twice", "cut"])
def test_read_chunk_leaves_anything_unusual_to_protobuf(wire: bytes) -> None:
    assert read_chunk(wire, 1) is None
    parse = chunk_or_message(1, vision_pb2.VisionResponse.FromString)
    try:
        expected = vision_pb2.VisionResponse.FromString(wire)
    except Exception as err:  # noqa: BLE001 - whatever protobuf refuses, the fallback refuses the same way
        with pytest.raises(type(err)):
            parse(wire)
    else:
        assert parse(wire) == expected


def test_negative_dtype_and_shape_read_as_protobuf_reads_them() -> None:
    wire = _tensor(dtype=-3, shape=[-1, 5], chunk_count=2)
    ours, reference = read_chunk(wire, 1), vision_pb2.VisionResponse.FromString(wire).embeddings
    assert (ours.dtype, ours.shape, ours.chunk_count) == (reference.dtype, tuple(reference.shape), 2)
