"""Tensor codec: exact round trips of every wire dtype, 1 MiB chunking, and every InvalidArgument branch."""
from __future__ import annotations

import pytest
import torch

from omnimesh.v1 import common_pb2
from runtime.errors import InvalidArgument
from runtime.tensor_codec import CHUNK_BYTES, TensorAssembler, encode_tensor, tensor_to_bytes

DTYPES = {
    torch.float32: common_pb2.DTYPE_FLOAT32,
    torch.float16: common_pb2.DTYPE_FLOAT16,
    torch.bfloat16: common_pb2.DTYPE_BFLOAT16,
    torch.int64: common_pb2.DTYPE_INT64,
    torch.int32: common_pb2.DTYPE_INT32,
    torch.int16: common_pb2.DTYPE_INT16,
    torch.uint8: common_pb2.DTYPE_UINT8,
}


def sample_tensor(dtype: torch.dtype, shape: tuple[int, ...] = (3, 5, 2)) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=g).to(dtype)
        if t.numel() >= 4:
            t.view(-1)[:4] = torch.tensor([float("inf"), -0.0, float("-inf"), 1e-3]).to(dtype)
        return t
    info = torch.iinfo(dtype)
    t = torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)
    if t.numel() >= 2:
        t.view(-1)[:2] = torch.tensor([info.min, info.max]).to(dtype)
    return t


def roundtrip(t: torch.Tensor, name: str = "x", chunk_bytes: int = CHUNK_BYTES) -> torch.Tensor:
    asm = TensorAssembler("req.tensors")
    msgs = list(encode_tensor(name, t, chunk_bytes))
    results = [asm.add(m) for m in msgs]
    assert results[:-1] == [None] * (len(msgs) - 1)
    got_name, got = results[-1]
    assert got_name == name and asm.pending == []
    return got


def msg(name: str = "x", dtype: int = common_pb2.DTYPE_FLOAT32, shape: tuple[int, ...] = (2,), data: bytes = b"\0" * 8,
        index: int = 0, count: int = 0) -> common_pb2.Tensor:
    return common_pb2.Tensor(name=name, dtype=dtype, shape=list(shape), data=data, chunk_index=index,
                             chunk_count=count)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_every_dtype_round_trips_bit_exact(dtype: torch.dtype) -> None:
    t = sample_tensor(dtype)
    (m,) = encode_tensor("x", t)
    assert m.dtype == DTYPES[dtype] and list(m.shape) == [3, 5, 2] and m.chunk_count == 1
    assert len(m.data) == t.numel() * t.element_size()
    got = roundtrip(t)
    assert got.dtype == dtype and got.shape == t.shape
    assert torch.equal(got.view(torch.uint8), t.contiguous().view(torch.uint8))  # bit-exact, incl. -0.0 and inf


def test_bfloat16_bytes_are_its_own_little_endian_bits() -> None:
    t = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    assert tensor_to_bytes(t) == bytes([0x80, 0x3F, 0x00, 0xC0])


def test_float32_bytes_are_little_endian_row_major() -> None:
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).t()  # non-contiguous: bytes follow the logical order
    assert tensor_to_bytes(t) == torch.tensor([1.0, 3.0, 2.0, 4.0]).numpy().tobytes()
    assert torch.equal(roundtrip(t), t)


@pytest.mark.parametrize("shape", [(), (0,), (4, 0, 3), (1,)])
def test_scalar_and_empty_shapes_round_trip(shape: tuple[int, ...]) -> None:
    t = torch.ones(shape, dtype=torch.float16)
    msgs = list(encode_tensor("x", t))
    assert len(msgs) == 1
    got = roundtrip(t)
    assert got.shape == t.shape and torch.equal(got, t)


def test_a_tensor_over_one_mib_splits_into_chunks_of_at_most_one_mib() -> None:
    t = torch.arange(600_000, dtype=torch.float32)  # 2.4 MB
    msgs = list(encode_tensor("emb", t))
    assert len(msgs) == 3
    assert all(len(m.data) <= CHUNK_BYTES for m in msgs) and len(msgs[0].data) == CHUNK_BYTES == 1 << 20
    assert [m.chunk_index for m in msgs] == [0, 1, 2] and {m.chunk_count for m in msgs} == {3}
    assert all(list(m.shape) == [600_000] and m.name == "emb" for m in msgs)
    assert b"".join(m.data for m in msgs) == tensor_to_bytes(t)
    assert torch.equal(roundtrip(t, "emb"), t)


def test_exactly_one_mib_is_one_message() -> None:
    t = torch.zeros(CHUNK_BYTES // 4, dtype=torch.float32)
    assert len(list(encode_tensor("x", t))) == 1
    assert len(list(encode_tensor("x", torch.zeros(CHUNK_BYTES // 4 + 1)))) == 2


def test_small_chunk_size_and_interleaved_tensors() -> None:
    a, b = sample_tensor(torch.int32, (7, 3)), sample_tensor(torch.bfloat16, (5,))
    ma, mb = list(encode_tensor("a", a, 16)), list(encode_tensor("b", b, 4))
    assert len(ma) == 6 and len(mb) == 3
    asm = TensorAssembler("tensors")
    done = {}
    for i in range(6):  # chunks of different tensors may interleave
        for m in (ma[i:i + 1] + mb[i:i + 1]):
            r = asm.add(m)
            if r is not None:
                done[r[0]] = r[1]
        if i == 1:
            assert asm.pending == ["a", "b"]
    assert torch.equal(done["a"], a) and torch.equal(done["b"], b.view(torch.int16).view(torch.bfloat16))
    assert asm.pending == []


def test_the_same_name_can_be_sent_again_after_it_completes() -> None:
    asm = TensorAssembler("t")
    for value in (1.0, 2.0):
        (m,) = encode_tensor("x", torch.full((2,), value))
        name, t = asm.add(m)
        assert t.tolist() == [value, value]


def test_encoding_an_unsupported_dtype_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="float64"):
        list(encode_tensor("x", torch.zeros(2, dtype=torch.float64)))


def test_decoded_tensor_owns_its_memory() -> None:
    (m,) = encode_tensor("x", torch.zeros(4))
    _, t = TensorAssembler("t").add(m)
    t += 1  # writable, not a view of the protobuf's immutable bytes
    assert t.tolist() == [1.0] * 4


# --- InvalidArgument branches -------------------------------------------------------------------------------------

def check_invalid(asm: TensorAssembler, m: common_pb2.Tensor, field: str, text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        asm.add(m)
    assert info.value.violations[0].field == field
    assert text in info.value.violations[0].description


@pytest.mark.parametrize("dtype", [common_pb2.DTYPE_UNSPECIFIED, 42])
def test_bad_dtype(dtype: int) -> None:
    check_invalid(TensorAssembler("start.embeddings"), msg("emb", dtype=dtype), "start.embeddings[emb]",
                  f"dtype {dtype} is not one of")


def test_first_chunk_out_of_order() -> None:
    check_invalid(TensorAssembler("t"), msg(index=1, count=2), "t[x]", "first chunk has chunk_index 1, expected 0")


def test_later_chunk_out_of_order() -> None:
    asm = TensorAssembler("t")
    assert asm.add(msg(data=b"\0" * 4, index=0, count=3)) is None
    check_invalid(asm, msg(data=b"\0" * 4, index=2, count=3), "t[x]", "chunk 2 arrived, expected 1")


def test_repeated_chunk() -> None:
    asm = TensorAssembler("t")
    asm.add(msg(data=b"\0" * 4, index=0, count=2))
    check_invalid(asm, msg(data=b"\0" * 4, index=0, count=2), "t[x]", "chunk 0 arrived, expected 1")


@pytest.mark.parametrize("change", [
    {"shape": (3,)},
    {"dtype": common_pb2.DTYPE_INT32},
    {"count": 3},
])
def test_chunks_that_disagree_on_dtype_shape_or_count(change: dict) -> None:
    asm = TensorAssembler("t")
    asm.add(msg(data=b"\0" * 4, index=0, count=2))
    second = {"data": b"\0" * 4, "index": 1, "count": 2, **change}
    check_invalid(asm, msg(**second), "t[x]", "dtype, shape or chunk_count differ")


@pytest.mark.parametrize("size", [7, 9, 0])
def test_wrong_byte_count(size: int) -> None:
    check_invalid(TensorAssembler("t"), msg(data=b"\0" * size), "t[x]", f"{size} bytes received, shape [2] needs 8")


def test_wrong_byte_count_across_chunks() -> None:
    asm = TensorAssembler("t")
    asm.add(msg(shape=(3,), data=b"\0" * 8, index=0, count=2))
    check_invalid(asm, msg(shape=(3,), data=b"\0" * 8, index=1, count=2), "t[x]", "16 bytes received")


def test_bytes_past_the_shape_are_refused_as_they_arrive_not_at_the_last_chunk() -> None:
    asm = TensorAssembler("t")
    check_invalid(asm, msg(shape=(2,), data=b"\0" * (1 << 20), index=0, count=2), "t[x]",
                  "1048576 bytes received, shape [2] needs 8")


def test_a_chunk_count_past_the_bytes_of_the_shape_is_refused() -> None:
    check_invalid(TensorAssembler("t"), msg(shape=(2,), data=b"", index=0, count=9), "t[x]",
                  "chunk_count 9 exceeds the 8 bytes of its shape")


def test_negative_shape() -> None:
    check_invalid(TensorAssembler("t"), msg(shape=(2, -1)), "t[x]", "shape [2, -1] has a negative dimension")


def test_over_the_byte_limit() -> None:
    asm = TensorAssembler("t", max_bytes=7)
    check_invalid(asm, msg(), "t[x]", "8 bytes exceed the limit of 7")


def test_a_shape_whose_size_overflows_int64_is_invalid_not_a_crash() -> None:
    # 2**32 * 2**32 wraps to 0 in int64 maths and would match an empty payload.
    check_invalid(TensorAssembler("t"), msg(dtype=common_pb2.DTYPE_UINT8, shape=(1 << 32, 1 << 32), data=b""),
                  "t[x]", "exceed the limit")


def test_an_error_names_the_field_in_the_message() -> None:
    with pytest.raises(InvalidArgument, match=r"^t\[x\]: "):
        TensorAssembler("t").add(msg(shape=(-1,)))
