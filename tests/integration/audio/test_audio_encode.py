"""The audio stage process encodes clips as the in-process encoder does, batches concurrent requests, and says what
it is."""
from __future__ import annotations

import asyncio

import grpc
import torch

from gateway.clients.encoders import AudioClient
from omnimesh.v1 import audio_pb2_grpc, common_pb2
from runtime.metrics import Metrics
from runtime.audio_lengths import audio_token_count, mel_frame_count
from tests.integration.audio.audio_calls import clip, embeddings, encode, metric, request
from tests.integration.audio.conftest import MAX_REQUEST_SECONDS, LocalAudio
from tests.integration.mesh_process import Proc

# Batching changes GEMM shapes, so a clip batched with others may differ from its lone encode in the last bits.
TOL = dict(rtol=1e-5, atol=1e-6)


def test_clips_through_the_gateway_client_equal_the_in_process_encoder(audio_addr: str,
                                                                       local_audio: LocalAudio) -> None:
    clips = [clip(0.3, seed=1), clip(2.0, seed=2)]

    async def run() -> list[torch.Tensor]:
        async with grpc.aio.insecure_channel(audio_addr) as channel:
            return await AudioClient(channel, Metrics("gateway", "test")).encode("parity", clips, timeout=60)

    out = asyncio.run(run())
    for c, got in zip(clips, out):
        want = local_audio.encode(c)
        assert got.shape == (audio_token_count(mel_frame_count(c.numel())), 64) == want.shape
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, **TOL)


def test_small_chunks_reassemble_and_responses_end_with_timings(audio_addr: str, local_audio: LocalAudio) -> None:
    c = clip(2.0, seed=3)
    responses = asyncio.run(encode(audio_addr, request([c], chunk_bytes=16 << 10)))  # 8 chunks of samples
    assert all(r.embeddings.ByteSize() <= (1 << 20) + 256 for r in responses[:-1])
    finished = responses[-1]
    assert finished.WhichOneof("msg") == "finished"
    assert finished.finished.timings.compute_seconds > 0
    assert finished.finished.timings.queue_seconds >= 0
    torch.testing.assert_close(embeddings(responses)["clip.0.embeddings"], local_audio.encode(c), **TOL)


def test_concurrent_requests_share_one_forward(audio_stage: Proc, audio_addr: str, local_audio: LocalAudio) -> None:
    port = audio_stage.ports["metrics_port"]
    items = lambda: metric(port, "omnimesh_encoder_items_per_batch_sum")  # noqa: E731
    batches = lambda: metric(port, "omnimesh_encoder_items_per_batch_count")  # noqa: E731
    items0, batches0 = items(), batches()
    clips = [clip(0.5 + 0.1 * i, seed=10 + i) for i in range(4)]

    async def run() -> list:
        return await asyncio.gather(*(encode(audio_addr, request([c])) for c in clips))

    results = asyncio.run(run())
    for c, responses in zip(clips, results):
        torch.testing.assert_close(embeddings(responses)["clip.0.embeddings"], local_audio.encode(c), **TOL)
    assert items() - items0 == 4
    assert batches() - batches0 < 4, "no two concurrent requests shared a forward"
    assert metric(port, "omnimesh_encoder_latency_seconds_count") >= 1
    assert metric(port, "omnimesh_queue_time_seconds_count") >= 4
    assert metric(port, "omnimesh_queue_depth") == 0


def test_info_reports_dims_and_limits(audio_addr: str) -> None:
    async def run() -> common_pb2.StageInfo:
        async with grpc.aio.insecure_channel(audio_addr) as channel:
            return await audio_pb2_grpc.AudioStub(channel).Info(common_pb2.InfoRequest())

    info = asyncio.run(run())
    assert info.stage == "audio" and info.replica == "audio-test" and info.device == "cpu"
    assert dict(info.dims) == {"output_dim": 64, "num_mel_bins": 128, "sampling_rate": 16000}
    assert info.limits["max_batch_seconds"] == 30
    assert info.limits["max_request_seconds"] == MAX_REQUEST_SECONDS
    assert info.limits["min_samples"] == 201


def test_a_request_at_the_cap_is_accepted(audio_addr: str) -> None:
    half = MAX_REQUEST_SECONDS / 2
    responses = asyncio.run(encode(audio_addr, request([clip(half, 20), clip(half, 21)])))
    assert set(embeddings(responses)) == {"clip.0.embeddings", "clip.1.embeddings"}
