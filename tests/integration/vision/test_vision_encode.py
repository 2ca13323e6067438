"""The vision stage process: embeddings over gRPC equal the in-process encoder's; concurrent requests share forwards."""
from __future__ import annotations

import asyncio

import grpc
import torch

from gateway.clients.encoders import VisionClient, VisionItemInput, VisionItemOutput
from omnimesh.v1 import common_pb2, vision_pb2_grpc
from runtime.metrics import Metrics
from services.vision.encoder import VisionEncoder
from services.vision.model import VisionOutput
from services.vision.preprocess import MediaFrames, MediaKind
from tests.integration.mesh_process import Proc, metric_value, scrape
from tests.integration.vision.conftest import MAX_BATCH_PATCHES, MAX_REQUEST_PATCHES
from tests.integration.vision.vision_calls import encode_raw, frame_msgs, frames, start_msg

NUM_DEEPSTACK = 3
IMAGE = VisionItemInput(frames(1, 64, 96, seed=1), (1, 4, 6), is_video=False)
VIDEO = VisionItemInput(frames(3, 64, 64, seed=2), (2, 4, 4), is_video=True)  # odd count: the last frame repeats


async def encode(addr: str, items: list[VisionItemInput], request_id: str = "t") -> list[VisionItemOutput]:
    async with grpc.aio.insecure_channel(addr) as channel:
        return await VisionClient(channel, Metrics("gateway", "test")).encode(request_id, items, NUM_DEEPSTACK, 30)


def reference(encoder: VisionEncoder, items: list[VisionItemInput]) -> list[VisionOutput]:
    kinds = [MediaKind.VIDEO if it.is_video else MediaKind.IMAGE for it in items]
    return encoder.encode([MediaFrames(k, it.frames) for k, it in zip(kinds, items)])


def assert_same(got: list[VisionItemOutput], want: list[VisionOutput], exact: bool = True) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for a, b in zip([g.merged, *g.deepstack], [w.merged, *w.deepstack], strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            if exact:
                assert torch.equal(a, b)
            else:  # batched with other requests' items: the same math over a longer row block
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_info_reports_dims_and_limits(vision_addr: str) -> None:
    async def info() -> common_pb2.StageInfo:
        async with grpc.aio.insecure_channel(vision_addr) as channel:
            return await vision_pb2_grpc.VisionStub(channel).Info(common_pb2.InfoRequest(), timeout=10)

    got = asyncio.run(info())
    assert got.stage == "vision" and got.replica == "vision-test" and got.device == "cpu"
    assert dict(got.dims) == {"out_hidden_size": 64, "num_deepstack": NUM_DEEPSTACK, "patch_size": 16,
                              "merge_size": 2, "temporal_patch_size": 2}
    assert dict(got.limits) == {"max_batch_patches": MAX_BATCH_PATCHES, "max_request_patches": MAX_REQUEST_PATCHES}


def test_image_equals_in_process_encoder(vision_addr: str, local_encoder: VisionEncoder) -> None:
    got = asyncio.run(encode(vision_addr, [IMAGE]))
    assert got[0].merged.shape == (6, 64)
    assert_same(got, reference(local_encoder, [IMAGE]))


def test_video_equals_in_process_encoder(vision_addr: str, local_encoder: VisionEncoder) -> None:
    got = asyncio.run(encode(vision_addr, [VIDEO]))
    assert got[0].merged.shape == (8, 64)
    assert_same(got, reference(local_encoder, [VIDEO]))


def test_image_and_video_in_one_request_share_one_forward(vision_addr: str, local_encoder: VisionEncoder) -> None:
    got = asyncio.run(encode(vision_addr, [IMAGE, VIDEO]))
    assert_same(got, reference(local_encoder, [IMAGE, VIDEO]))


def test_response_stream_names_order_and_timings(vision_addr: str) -> None:
    messages = [start_msg((False, [1, 2, 2]), (True, [1, 2, 2])), *frame_msgs("item.0", frames(1, 32, 32)),
                *frame_msgs("item.1", frames(2, 32, 32), chunk_bytes=1000)]  # the server takes any chunking
    replies = asyncio.run(encode_raw(vision_addr, messages))
    names = [r.embeddings.name for r in replies[:-1]]
    assert names == [f"item.{i}.{part}" for i in range(2) for part in ("merged", "deepstack.0", "deepstack.1",
                                                                        "deepstack.2")]
    assert all(r.embeddings.dtype == common_pb2.DTYPE_FLOAT32 and list(r.embeddings.shape) == [1, 64]
               for r in replies[:-1])
    timings = replies[-1].finished.timings
    assert replies[-1].WhichOneof("msg") == "finished"
    assert timings.compute_seconds > 0 and timings.queue_seconds >= 0


def test_concurrent_requests_of_different_sizes_batch_together(vision_stage: Proc, vision_addr: str,
                                                               local_encoder: VisionEncoder) -> None:
    port = vision_stage.ports["metrics_port"]
    sizes = [(32, 64), (64, 64), (96, 32)]
    items = [VisionItemInput(frames(1, h, w, seed=10 + i), (1, h // 16, w // 16), False)
             for i, (h, w) in enumerate(sizes)]

    def counts() -> tuple[float, float]:
        text = scrape(port)
        return (metric_value(text, "omnimesh_encoder_items_per_batch_count"),
                metric_value(text, "omnimesh_encoder_items_per_batch_bucket", le="1.0"))

    async def concurrently() -> list[list[VisionItemOutput]]:
        return list(await asyncio.gather(*(encode(vision_addr, [it], f"r{i}") for i, it in enumerate(items))))

    batches0, singles0 = counts()
    results = asyncio.run(concurrently())
    batches1, singles1 = counts()
    multi = (batches1 - batches0) - (singles1 - singles0)
    assert batches1 - batches0 < len(items) and multi >= 1  # some forward held items of several requests
    for got, it in zip(results, items):
        assert_same(got, reference(local_encoder, [it]), exact=False)
