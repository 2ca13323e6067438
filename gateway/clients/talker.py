"""The gateway's client of the talker stage: conditioning once, thinker tokens as they come, audio chunks back."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import torch

from omnimesh.v1 import common_pb2, talker_pb2, talker_pb2_grpc, thinker_pb2
from runtime.metrics import Metrics
from runtime.tensor_codec import encode_tensor
from gateway.clients.errors import stage_error, stage_info
from gateway.timeline import end_phase, stage_timings


@dataclass(frozen=True)
class SpeakSetup:
    request_id: str
    voice: str
    prompt_token_ids: list[int]
    media: list[thinker_pb2.MediaSpan]
    return_codes: bool
    sampling: common_pb2.SamplingParams | None = None


@dataclass(frozen=True)
class SpeechDone:
    num_frames: int
    audio_seconds: float
    finish_reason: int


_END = object()


class TalkerFeed:
    """What the gateway pushes into one Speak call while the thinker writes: conditioning, then token ids."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()

    def conditioning(self, media_hidden: torch.Tensor) -> None:
        self._queue.put_nowait(media_hidden)

    def tokens(self, token_ids: list[int]) -> None:
        if token_ids:
            self._queue.put_nowait(list(token_ids))

    def end(self) -> None:
        self._queue.put_nowait(_END)

    async def get(self) -> object:
        return await self._queue.get()


class TalkerClient:
    def __init__(self, channel: grpc.aio.Channel, metrics: Metrics) -> None:
        self._stub = talker_pb2_grpc.TalkerStub(channel)
        self._metrics = metrics

    async def info(self, timeout: float) -> common_pb2.StageInfo:
        return await stage_info(self._stub.Info, "talker", timeout)

    async def speak(self, setup: SpeakSetup, feed: TalkerFeed, timeout: float | None
                    ) -> AsyncIterator[common_pb2.AudioChunk | SpeechDone]:
        call = self._stub.Speak(self._requests(setup, feed), timeout=timeout)
        received = 0
        try:
            async for msg in call:
                received += msg.ByteSize()
                if msg.WhichOneof("msg") == "audio":
                    end_phase("first_audio")
                    yield msg.audio
                else:
                    f = msg.finished
                    stage_timings("talker", f.timings.queue_seconds, f.timings.compute_seconds)
                    yield SpeechDone(f.num_frames, f.audio_seconds, f.finish_reason)
                    # `finished` is the answer's end. Waiting for the call's status instead would let a race
                    # turn it INTERNAL: if the talker finished before the thinker, this side may still be
                    # writing text as the call closes, and grpc reports that write as "Internal error from Core".
                    return
        except grpc.aio.AioRpcError as err:
            raise stage_error("talker", err) from None
        finally:
            call.cancel()
            self._metrics.get("omnimesh_edge_bytes_total", from_stage="talker", to_stage="gateway").inc(received)

    async def _requests(self, setup: SpeakSetup, feed: TalkerFeed) -> AsyncIterator[talker_pb2.SpeakRequest]:
        sent, busy = 0, 0.0
        msg = talker_pb2.SpeakRequest(start=talker_pb2.SpeakStart(
            request_id=setup.request_id, voice=setup.voice, prompt_token_ids=setup.prompt_token_ids,
            media=setup.media, return_codes=setup.return_codes, talker_sampling=setup.sampling))
        try:
            while True:
                sent += msg.ByteSize()
                yield msg
                item = await feed.get()
                t0 = time.perf_counter()
                if item is _END:
                    yield talker_pb2.SpeakRequest(text_end=talker_pb2.TextEnd())
                    return
                if isinstance(item, torch.Tensor):
                    chunks = list(encode_tensor("talker.media_hidden", item))
                    for chunk in chunks[:-1]:
                        conditioning = talker_pb2.SpeakRequest(conditioning=chunk)
                        sent += conditioning.ByteSize()
                        yield conditioning
                    msg = talker_pb2.SpeakRequest(conditioning=chunks[-1])
                else:
                    msg = talker_pb2.SpeakRequest(text=talker_pb2.TextTokens(token_ids=item))
                busy += time.perf_counter() - t0
        finally:  # also when the call ends first: the talker may finish before the text does
            # thinker -> talker is relayed by the gateway: count it as that edge
            self._metrics.get("omnimesh_edge_bytes_total", from_stage="thinker", to_stage="talker").inc(sent)
            self._metrics.get("omnimesh_edge_seconds_total", from_stage="thinker", to_stage="talker").inc(busy)
