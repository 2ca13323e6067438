"""The audio stage's Encode rejects every malformed request with INVALID_ARGUMENT naming the field and the fix."""
from __future__ import annotations

import asyncio

import grpc
import pytest
import torch

from omnimesh.v1 import audio_pb2, common_pb2
from tests.integration.audio.audio_calls import clip, encode, request, samples, start
from tests.integration.audio.conftest import MAX_REQUEST_SECONDS
from tests.integration.status_checks import assert_invalid_argument

N = 1600  # 0.1 s


def _wrong_chunk(**fields: object) -> audio_pb2.AudioRequest:
    tensor = dict(name="clip.0", dtype=common_pb2.DTYPE_FLOAT32, shape=[N], data=b"\0" * (N * 4), chunk_count=1)
    tensor.update(fields)
    return audio_pb2.AudioRequest(samples=common_pb2.Tensor(**tensor))


def _with_nan() -> torch.Tensor:
    c = clip(0.1)
    c[7] = float("nan")
    return c


# case -> (messages, the field the error names, words its description must hold)
CASES: dict[str, tuple[list[audio_pb2.AudioRequest], str, tuple[str, ...]]] = {
    "no messages": ([], "start", ("first message",)),
    "samples before start": (samples("clip.0", clip(0.1)), "start", ("first message",)),
    "two starts": ([start(N), start(N)], "start", ("only one",)),
    "no clips": ([start()], "start.num_samples", ("empty",)),
    "clip too short": ([start(N, 200)], "start.num_samples[1]", ("200", "at least 201 samples")),
    "over the request cap": ([start(N, MAX_REQUEST_SECONDS * 16000 + 160)], "start.num_samples",
                             ("6.11 s", f"max_request_seconds={MAX_REQUEST_SECONDS}", "max_request_size=600")),
    "sample count disagrees": ([start(N), *samples("clip.0", clip(0.11))], "samples[clip.0]",
                               ("1760 samples", "start.num_samples[0] is 1600")),
    "dtype not float32": ([start(N), *samples("clip.0", clip(0.1).half())], "samples[clip.0]",
                          ("DTYPE_FLOAT16", "float32")),
    "not 1-D": ([start(N), *samples("clip.0", clip(0.1).view(2, N // 2))], "samples[clip.0]", ("1-D", "[2, 800]")),
    "missing clip": ([start(N, N), *samples("clip.0", clip(0.1))], "samples[clip.1]", ("is missing",)),
    "extra clip": ([*request([clip(0.1)]), *samples("clip.1", clip(0.1))], "samples[clip.1]",
                   ("not a tensor of this request", "clip.0 .. clip.0")),
    "badly named tensor": ([start(N), *samples("clip.00", clip(0.1))], "samples[clip.00]",
                           ("not a tensor of this request",)),
    "clip sent twice": ([*request([clip(0.1)]), *samples("clip.0", clip(0.1))], "samples[clip.0]", ("twice",)),
    "non-finite samples": (request([_with_nan()]), "samples[clip.0]", ("1 non-finite",)),
    "stream ends mid-clip": ([start(N), _wrong_chunk(data=b"\0" * 64, chunk_count=2)], "samples", ("incomplete",)),
    "more bytes than declared": ([start(N), _wrong_chunk(chunk_count=3), _wrong_chunk(chunk_index=1, chunk_count=3)],
                                 "samples[clip.0]", ("sent more than the 6400 bytes",)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_encode_is_invalid_argument(audio_addr: str, case: str) -> None:
    messages, field, words = CASES[case]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        asyncio.run(encode(audio_addr, messages))
    assert_invalid_argument(caught.value, field, words)

