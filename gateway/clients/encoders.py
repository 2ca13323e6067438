"""The gateway's clients of the encoder stages (vision, audio): send media, get embeddings back."""
from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import grpc
import torch

from omnimesh.v1 import audio_pb2, audio_pb2_grpc, common_pb2, vision_pb2, vision_pb2_grpc
from runtime.errors import StageFault
from runtime.metrics import Metrics
from runtime.tensor_codec import TensorAssembler
from runtime.tensor_wire import (TensorChunk, chunk_or_message, keep_serialized, method_path, payload_bytes,
                                 serialized_chunks)
from gateway.clients.errors import add_stage_chunk, check_stage_done, stage_error, stage_info
from gateway.timeline import stage_timings


@dataclass(frozen=True)
class VisionItemInput:
    frames: torch.Tensor  # uint8 [F, H, W, 3], resized to multiples of patch_size * merge_size
    grid_thw: tuple[int, int, int]
    is_video: bool


@dataclass(frozen=True)
class VisionItemOutput:
    merged: torch.Tensor  # [tokens, hidden]
    deepstack: list[torch.Tensor]  # each [tokens, hidden]


class _EdgeMeter:
    """Counts bytes and seconds on one stage edge, in both directions."""

    def __init__(self, metrics: Metrics, stage: str) -> None:
        self._m = metrics
        self._stage = stage

    def sent(self, nbytes: int, seconds: float) -> None:
        self._m.get("omnimesh_edge_bytes_total", from_stage="gateway", to_stage=self._stage).inc(nbytes)
        self._m.get("omnimesh_edge_seconds_total", from_stage="gateway", to_stage=self._stage).inc(seconds)

    def received(self, nbytes: int, seconds: float) -> None:
        self._m.get("omnimesh_edge_bytes_total", from_stage=self._stage, to_stage="gateway").inc(nbytes)
        self._m.get("omnimesh_edge_seconds_total", from_stage=self._stage, to_stage="gateway").inc(seconds)


async def _stream(call: grpc.aio.StreamStreamCall, stage: str, meter: _EdgeMeter) -> dict[str, torch.Tensor]:
    """Reads every embeddings chunk of an Encode call into whole tensors by name."""
    assembler = TensorAssembler(f"{stage}.embeddings")
    out: dict[str, torch.Tensor] = {}
    received, t_first = 0, None
    try:
        async for msg in call:
            if t_first is None:
                t_first = time.perf_counter()
            if isinstance(msg, TensorChunk):  # an embeddings chunk, read without protobuf (`_encode_call`)
                received += msg.nbytes
                done = add_stage_chunk(assembler, msg, stage)
            else:
                received += msg.ByteSize()
                if msg.WhichOneof("msg") == "finished":
                    stage_timings(stage, msg.finished.timings.queue_seconds, msg.finished.timings.compute_seconds)
                done = add_stage_chunk(assembler, msg.embeddings, stage) if msg.WhichOneof("msg") == "embeddings" \
                    else None
            if done is not None:
                out[done[0]] = done[1]
    except grpc.aio.AioRpcError as err:
        raise stage_error(stage, err) from None
    finally:
        call.cancel()
    meter.received(received, time.perf_counter() - (t_first or time.perf_counter()))
    check_stage_done(assembler, stage)
    return out


class VisionClient:
    def __init__(self, channel: grpc.aio.Channel, metrics: Metrics) -> None:
        self._stub = vision_pb2_grpc.VisionStub(channel)
        self._encode = _encode_call(channel, vision_pb2.DESCRIPTOR.services_by_name["Vision"],
                                    vision_pb2.VisionRequest, vision_pb2.VisionResponse)
        self._meter = _EdgeMeter(metrics, "vision")

    async def info(self, timeout: float) -> common_pb2.StageInfo:
        return await stage_info(self._stub.Info, "vision", timeout)

    async def encode(self, request_id: str, items: list[VisionItemInput], num_deepstack: int,
                     timeout: float | None) -> list[VisionItemOutput]:
        call = self._encode(self._requests(request_id, items), timeout=timeout)
        tensors = await _stream(call, "vision", self._meter)
        try:
            return [VisionItemOutput(tensors[f"item.{i}.merged"],
                                     [tensors[f"item.{i}.deepstack.{k}"] for k in range(num_deepstack)])
                    for i in range(len(items))]
        except KeyError as missing:
            raise StageFault(f"vision stage did not return {missing}", "vision") from None

    def _requests(self, request_id: str, items: list[VisionItemInput]) -> AsyncIterator[vision_pb2.VisionRequest]:
        start = vision_pb2.VisionRequest(start=vision_pb2.VisionStart(request_id=request_id, items=[
            vision_pb2.VisionItem(is_video=it.is_video, grid_thw=list(it.grid_thw)) for it in items]))
        frames = _tensor_messages(vision_pb2.VisionRequest, "frames", "item", (it.frames for it in items))
        return _metered([start], frames, self._meter)


class AudioClient:
    def __init__(self, channel: grpc.aio.Channel, metrics: Metrics) -> None:
        self._stub = audio_pb2_grpc.AudioStub(channel)
        self._encode = _encode_call(channel, audio_pb2.DESCRIPTOR.services_by_name["Audio"], audio_pb2.AudioRequest,
                                    audio_pb2.AudioResponse)
        self._meter = _EdgeMeter(metrics, "audio")

    async def info(self, timeout: float) -> common_pb2.StageInfo:
        return await stage_info(self._stub.Info, "audio", timeout)

    async def encode(self, request_id: str, clips: list[torch.Tensor], timeout: float | None) -> list[torch.Tensor]:
        """clips: float32 [samples] at 16 kHz each -> embeddings [tokens, hidden] each."""
        call = self._encode(self._requests(request_id, clips), timeout=timeout)
        tensors = await _stream(call, "audio", self._meter)
        try:
            return [tensors[f"clip.{i}.embeddings"] for i in range(len(clips))]
        except KeyError as missing:
            raise StageFault(f"audio stage did not return {missing}", "audio") from None

    def _requests(self, request_id: str, clips: list[torch.Tensor]) -> AsyncIterator[audio_pb2.AudioRequest]:
        start = audio_pb2.AudioRequest(start=audio_pb2.AudioStart(request_id=request_id,
                                                                  num_samples=[int(c.numel()) for c in clips]))
        return _metered([start], _tensor_messages(audio_pb2.AudioRequest, "samples", "clip", clips), self._meter)


async def _metered(head: Iterable, rest: Iterable, meter: _EdgeMeter) -> AsyncIterator:
    """Yields a request stream, counting its bytes and seconds on the edge even when the call ends first."""
    t0, sent = time.perf_counter(), 0
    try:
        for messages in (head, rest):
            for msg in messages:
                sent += payload_bytes(msg)
                yield msg
    finally:
        meter.sent(sent, time.perf_counter() - t0)


def _encode_call(channel: grpc.aio.Channel, service: object, request: type, response: type
                 ) -> grpc.aio.StreamStreamMultiCallable:  # fmt: skip
    """The stage's Encode call, sending the tensor chunks of `_tensor_messages` already serialized and reading the
    embeddings chunks it answers with straight into their tensors (runtime/tensor_wire.py)."""
    embeddings = response.DESCRIPTOR.fields_by_name["embeddings"].number
    return channel.stream_stream(method_path(service, "Encode"),
                                 request_serializer=keep_serialized(request.SerializeToString),
                                 response_deserializer=chunk_or_message(embeddings, response.FromString))


def _tensor_messages(message_type: type, field: str, prefix: str, tensors: Iterable[torch.Tensor]) -> Iterable:
    """Each tensor's chunks as serialized `message_type`s with `field` set: one copy of the frames or samples, made
    on the event loop as the stream is written (a protobuf message per chunk took four)."""
    number = message_type.DESCRIPTOR.fields_by_name[field].number
    for i, t in enumerate(tensors):
        yield from serialized_chunks(number, f"{prefix}.{i}", t)

