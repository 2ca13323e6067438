"""Helpers for talking to the vision stage in tests: raw Encode calls, frames, and the stage's health."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import grpc
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, vision_pb2, vision_pb2_grpc
from runtime.tensor_codec import encode_tensor

SERVICE = "omnimesh.v1.Vision"


def frames(num_frames: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """Random uint8 RGB frames [F, H, W, 3]."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (num_frames, height, width, 3), generator=gen, dtype=torch.uint8)


def start_msg(*items: tuple[bool, list[int]], request_id: str = "t") -> vision_pb2.VisionRequest:
    return vision_pb2.VisionRequest(start=vision_pb2.VisionStart(request_id=request_id, items=[
        vision_pb2.VisionItem(is_video=is_video, grid_thw=grid) for is_video, grid in items]))


def frame_msgs(name: str, t: torch.Tensor, chunk_bytes: int = 1 << 20) -> list[vision_pb2.VisionRequest]:
    return [vision_pb2.VisionRequest(frames=c) for c in encode_tensor(name, t, chunk_bytes)]


def raw_frames(**fields: object) -> vision_pb2.VisionRequest:
    return vision_pb2.VisionRequest(frames=common_pb2.Tensor(**fields))


async def _iterate(messages: Iterable[vision_pb2.VisionRequest]) -> AsyncIterator[vision_pb2.VisionRequest]:
    for m in messages:
        yield m


async def encode_raw(addr: str, messages: Iterable[vision_pb2.VisionRequest]) -> list[vision_pb2.VisionResponse]:
    async with grpc.aio.insecure_channel(addr) as channel:
        return [r async for r in vision_pb2_grpc.VisionStub(channel).Encode(_iterate(messages))]


async def health(addr: str) -> int:
    async with grpc.aio.insecure_channel(addr) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=SERVICE),
                                                                timeout=5)
        return reply.status


SERVING = health_pb2.HealthCheckResponse.SERVING
