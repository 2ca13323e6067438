"""Raw Encode calls on the audio stage for tests: request messages, a whole call, metric deltas."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import grpc
import torch

from omnimesh.v1 import audio_pb2, audio_pb2_grpc
from runtime.tensor_codec import TensorAssembler, encode_tensor
from tests.integration.mesh_process import metric_value, scrape

RATE = 16000


def clip(seconds: float, seed: int = 0) -> torch.Tensor:
    """float32 [samples] noise in [-0.5, 0.5): a tone would do, but noise exercises every mel bin."""
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(int(seconds * RATE), generator=gen) - 0.5


def start(*num_samples: int, request_id: str = "t") -> audio_pb2.AudioRequest:
    return audio_pb2.AudioRequest(start=audio_pb2.AudioStart(request_id=request_id, num_samples=list(num_samples)))


def samples(name: str, t: torch.Tensor, chunk_bytes: int = 1 << 20) -> list[audio_pb2.AudioRequest]:
    return [audio_pb2.AudioRequest(samples=c) for c in encode_tensor(name, t, chunk_bytes)]


def request(clips: list[torch.Tensor], chunk_bytes: int = 1 << 20) -> list[audio_pb2.AudioRequest]:
    msgs = [start(*(c.numel() for c in clips))]
    for i, c in enumerate(clips):
        msgs += samples(f"clip.{i}", c, chunk_bytes)
    return msgs


async def messages(msgs: Iterable[audio_pb2.AudioRequest]) -> AsyncIterator[audio_pb2.AudioRequest]:
    for m in msgs:
        yield m


async def encode(addr: str, msgs: list[audio_pb2.AudioRequest]) -> list[audio_pb2.AudioResponse]:
    async with grpc.aio.insecure_channel(addr) as channel:
        return [r async for r in audio_pb2_grpc.AudioStub(channel).Encode(messages(msgs))]


def embeddings(responses: list[audio_pb2.AudioResponse]) -> dict[str, torch.Tensor]:
    assembler = TensorAssembler("embeddings")
    out = {}
    for r in responses:
        if r.WhichOneof("msg") == "embeddings":
            done = assembler.add(r.embeddings)
            if done is not None:
                out[done[0]] = done[1]
    assert not assembler.pending
    return out


def metric(metrics_port: int, name: str, **labels: str) -> float:
    return metric_value(scrape(metrics_port), name, **labels)
