"""The gateway's client of the thinker stage: routes a prompt to a replica (gateway/routing/), sends it and its
media embeddings, yields token batches."""
from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field

import grpc
import torch

from omnimesh.v1 import common_pb2, thinker_pb2
from runtime.engine.sampling_params import SamplingOptions
from runtime.metrics import Metrics
from runtime.sampling import sampling_to_pb
from runtime.tensor_codec import TensorAssembler
from runtime.tensor_wire import keep_serialized, method_path, serialized_chunks
from gateway.clients.errors import add_stage_chunk, check_stage_done, stage_error, stage_info
from gateway.routing.replica import ThinkerReplica
from gateway.routing.router import ThinkerRouter
from gateway.timeline import stage_timings

log = logging.getLogger(__name__)


class _Unanswered(Exception):
    """A replica failed UNAVAILABLE before its first response: the request may go to another one."""

    def __init__(self, err: grpc.aio.AioRpcError) -> None:
        super().__init__(err.code().name)
        self.err = err


@dataclass
class ThinkerPrompt:
    request_id: str
    token_ids: list[int]
    media: list[thinker_pb2.MediaSpan] = field(default_factory=list)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # "media.<i>.embeddings" / ".deepstack.<k>"
    use_audio_in_video: bool = False

    @property
    def media_salts(self) -> tuple[tuple[int, int, str], ...]:
        """What the engine salts its block keys with (services/thinker/service.py), for routing by cached prefix."""
        return tuple((m.offset, m.offset + m.length, m.content_hash) for m in self.media)


@dataclass
class TextChunk:
    token_ids: list[int]
    text: str
    logprobs: list[common_pb2.TokenLogprob]


@dataclass
class Conditioning:
    media_hidden: torch.Tensor


@dataclass
class ThinkerDone:
    finish_reason: int  # common_pb2.FinishReason
    usage: common_pb2.Usage


_GENERATE = method_path(thinker_pb2.DESCRIPTOR.services_by_name["Thinker"], "Generate")
_MEDIA_FIELD = thinker_pb2.GenerateRequest.DESCRIPTOR.fields_by_name["media"].number


class ThinkerClient:
    def __init__(self, router: ThinkerRouter, metrics: Metrics) -> None:
        self.router = router
        self._metrics = metrics

    async def info(self, timeout: float) -> common_pb2.StageInfo:
        return await stage_info((await self.router.any_replica()).stub.Info, "thinker", timeout)

    def replica_infos(self, timeout: float) -> list[Awaitable[common_pb2.StageInfo]]:
        """One Info call per known replica (the mesh's Info lists each), or one to any when none is known yet."""
        replicas = list(self.router.replicas.values())
        if not replicas:
            return [self.info(timeout)]
        return [stage_info(r.stub.Info, "thinker", timeout) for r in replicas]

    async def generate(self, prompt: ThinkerPrompt, sampling: SamplingOptions, want_conditioning: bool,
                       timeout: float | None) -> AsyncIterator[TextChunk | Conditioning | ThinkerDone]:
        """On a replica the router picks; one that fails UNAVAILABLE before answering (it died, and its health
        watch has not said so yet) is suspected and the request goes once more, to another replica."""
        for attempt in range(2):
            # the talker needs the media rows' hidden states computed, so such a request reuses no cached blocks
            replica, choice = await self.router.route(prompt.token_ids, prompt.media_salts,
                                                      reuses_cache=not want_conditioning)
            log.debug("thinker replica %s (%s, %d cached blocks of the prompt)", replica.name, choice.decision,
                      choice.prefix_blocks)
            try:
                with replica.carrying():
                    async for out in self._generate(replica, prompt, sampling, want_conditioning, timeout):
                        yield out
                return
            except _Unanswered as unanswered:
                if attempt == 1:
                    raise stage_error("thinker", unanswered.err) from None
                log.warning("thinker replica %s failed before answering (%s); routing the request again",
                            replica.name, unanswered.err.code().name)

    async def _generate(self, replica: ThinkerReplica, prompt: ThinkerPrompt, sampling: SamplingOptions,
                        want_conditioning: bool,
                        timeout: float | None) -> AsyncIterator[TextChunk | Conditioning | ThinkerDone]:
        # the media chunks go out already serialized (runtime/tensor_wire.py): one copy of the embeddings on this loop
        generate = replica.channel.stream_stream(
            _GENERATE, request_serializer=keep_serialized(thinker_pb2.GenerateRequest.SerializeToString),
            response_deserializer=thinker_pb2.GenerateResponse.FromString)
        call = generate(self._requests(prompt, sampling, want_conditioning), timeout=timeout)
        assembler = TensorAssembler("talker_conditioning")
        received = 0
        try:
            async for msg in call:
                received += msg.ByteSize()
                kind = msg.WhichOneof("msg")
                if kind == "tokens":
                    yield TextChunk(list(msg.tokens.token_ids), msg.tokens.text, list(msg.tokens.logprobs))
                elif kind == "talker_conditioning":
                    done = add_stage_chunk(assembler, msg.talker_conditioning, "thinker")
                    if done is not None:
                        yield Conditioning(done[1])
                else:
                    check_stage_done(assembler, "thinker")
                    timings = msg.finished.timings
                    stage_timings("thinker", timings.queue_seconds, timings.compute_seconds)
                    yield ThinkerDone(msg.finished.finish_reason, msg.finished.usage)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                replica.suspect()
                if not received:
                    raise _Unanswered(err) from None
            raise stage_error("thinker", err) from None
        finally:
            call.cancel()  # no-op when finished; frees the thinker's KV at once when we stop early
            self._metrics.get("omnimesh_edge_bytes_total", from_stage="thinker", to_stage="gateway").inc(received)

    async def _requests(self, prompt: ThinkerPrompt, sampling: SamplingOptions,
                        want_conditioning: bool) -> AsyncIterator[thinker_pb2.GenerateRequest | bytes]:
        t0 = time.perf_counter()
        sent = 0
        start = thinker_pb2.GenerateRequest(start=thinker_pb2.GenerateStart(
            request_id=prompt.request_id, token_ids=prompt.token_ids, media=prompt.media,
            sampling=sampling_to_pb(sampling), use_audio_in_video=prompt.use_audio_in_video,
            return_talker_conditioning=want_conditioning))
        try:
            sent += start.ByteSize()
            yield start
            for name, tensor in prompt.tensors.items():
                for msg in serialized_chunks(_MEDIA_FIELD, name, tensor):
                    sent += len(msg)
                    yield msg
        finally:
            self._metrics.get("omnimesh_edge_bytes_total", from_stage="gateway", to_stage="thinker").inc(sent)
            self._metrics.get("omnimesh_edge_seconds_total", from_stage="gateway", to_stage="thinker").inc(
                time.perf_counter() - t0)
