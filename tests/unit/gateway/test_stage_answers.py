"""What the gateway makes of a stage's failure or of a stage's malformed answer.

A stage's status maps to the status the gateway's client sees (`stage_error`); a stage that answers with tensors the
gateway cannot use (cut short, out of order, missing) is INTERNAL naming that stage, never INVALID_ARGUMENT, which
would tell the client to change a request that was fine. The encoder cases run a real grpc.aio server on loopback
that plays a vision or audio stage answering wrongly.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
import torch
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from omnimesh.v1 import audio_pb2, audio_pb2_grpc, common_pb2, vision_pb2, vision_pb2_grpc
from gateway.clients.encoders import AudioClient, VisionClient, VisionItemInput
from gateway.clients.errors import add_stage_chunk, check_stage_done, stage_error
from runtime.errors import (Cancelled, DeadlineExceeded, InvalidArgument, OmniError, ResourceExhausted, StageFault,
                            Unavailable, Unimplemented)
from runtime.metrics import Metrics
from runtime.tensor_codec import TensorAssembler, encode_tensor


@pytest.mark.parametrize(("code", "kind"), [
    (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgument),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhausted),
    (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceeded),
    (grpc.StatusCode.CANCELLED, Cancelled),
    (grpc.StatusCode.UNIMPLEMENTED, Unimplemented),
    (grpc.StatusCode.UNAVAILABLE, Unavailable),
    (grpc.StatusCode.INTERNAL, Unavailable),
    (grpc.StatusCode.UNKNOWN, Unavailable),
])
def test_a_stage_status_maps_to_the_clients(code: grpc.StatusCode, kind: type[OmniError]) -> None:
    err = stage_error("audio", grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "what it said"))
    assert type(err) is kind
    if kind in (InvalidArgument, Unimplemented, Unavailable):
        assert "what it said" in err.message
    if kind is Unavailable:
        assert err.stage == "audio" and code.name in err.message


def _refusal(code: grpc.StatusCode, details: list[Any], status_code: int | None = None) -> grpc.aio.AioRpcError:
    """A stage's failed call as grpc.aio hands it over, its google.rpc.Status in the trailers."""
    status = status_pb2.Status(code=code.value[0] if status_code is None else status_code, message="full")
    for d in details:
        status.details.add().Pack(d)
    trailers = grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, "full")


def test_a_stage_load_refusal_keeps_the_stages_retry_delay() -> None:
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2, nanos=500_000_000))
    err = stage_error("vision", _refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, [error_details_pb2.ErrorInfo(), retry]))
    assert isinstance(err, ResourceExhausted) and err.retry_after_s == 2.5
    assert err.message == "vision is at capacity: full"


def test_a_stage_refusal_without_retry_info_is_passed_on_without_one() -> None:
    # grpc's own RESOURCE_EXHAUSTED (a message over a size limit) carries no details: retrying cannot help
    bare = grpc.aio.AioRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), grpc.aio.Metadata(), "big")
    assert stage_error("vision", bare).retry_after_s is None
    assert stage_error("vision", _refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, [])).retry_after_s is None
    # details whose code disagrees with the call's are not trusted
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=3))
    mismatched = _refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, [retry], status_code=code_pb2.UNAVAILABLE)
    assert stage_error("vision", mismatched).retry_after_s is None


def test_a_chunk_the_assembler_refuses_is_the_stages_fault() -> None:
    chunk = next(encode_tensor("clip.0.embeddings", torch.zeros(2, 3)))
    chunk.chunk_index = 1  # a first chunk must have index 0
    with pytest.raises(StageFault, match=r"audio stage sent a malformed tensor: .*chunk_index 1, expected 0") as e:
        add_stage_chunk(TensorAssembler("audio.embeddings"), chunk, "audio")
    assert e.value.stage == "audio" and e.value.grpc_code_name == "INTERNAL"


def test_an_answer_that_ends_inside_a_tensor_is_the_stages_fault() -> None:
    assembler = TensorAssembler("thinker.conditioning")
    first = next(encode_tensor("hidden", torch.zeros(64, 16), chunk_bytes=1024))
    assert add_stage_chunk(assembler, first, "thinker") is None
    with pytest.raises(StageFault, match=r"thinker stage ended its answer with tensors incomplete: \['hidden'\]"):
        check_stage_done(assembler, "thinker")
    check_stage_done(TensorAssembler("x"), "thinker")  # nothing begun: nothing missing


# --- encoder clients against a stage that answers wrongly ---------------------------------------------------

Answer = Callable[[], list[common_pb2.Tensor]]


class WrongVision(vision_pb2_grpc.VisionServicer):
    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    async def Encode(self, request_iterator: AsyncIterator[vision_pb2.VisionRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[vision_pb2.VisionResponse]:
        async for _ in request_iterator:  # the whole request, as a stage reads it
            pass
        for t in self.answer():
            yield vision_pb2.VisionResponse(embeddings=t)
        yield vision_pb2.VisionResponse(finished=vision_pb2.VisionFinished())


class WrongAudio(audio_pb2_grpc.AudioServicer):
    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    async def Encode(self, request_iterator: AsyncIterator[audio_pb2.AudioRequest],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[audio_pb2.AudioResponse]:
        async for _ in request_iterator:
            pass
        for t in self.answer():
            yield audio_pb2.AudioResponse(embeddings=t)
        yield audio_pb2.AudioResponse(finished=audio_pb2.AudioFinished())


def _truncated(name: str) -> list[common_pb2.Tensor]:
    return list(encode_tensor(name, torch.zeros(64, 16), chunk_bytes=1024))[:1]  # 1 of 4 chunks


def _run_vision(answer: Answer) -> StageFault:
    async def run() -> StageFault:
        server = grpc.aio.server()
        vision_pb2_grpc.add_VisionServicer_to_server(WrongVision(answer), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                client = VisionClient(channel, Metrics("gateway", "t"))
                item = VisionItemInput(torch.zeros(2, 32, 32, 3, dtype=torch.uint8), (1, 2, 2), False)
                with pytest.raises(StageFault) as e:
                    await asyncio.wait_for(client.encode("r", [item], 1, timeout=10), 10)
                return e.value
        finally:
            await server.stop(None)

    return asyncio.run(run())


def test_a_vision_answer_cut_short_is_internal_naming_vision() -> None:
    err = _run_vision(lambda: _truncated("item.0.merged"))
    assert err.stage == "vision" and "tensors incomplete: ['item.0.merged']" in err.message


def test_a_vision_answer_missing_a_tensor_is_internal_naming_vision() -> None:
    err = _run_vision(lambda: list(encode_tensor("item.0.merged", torch.zeros(1, 8))))  # no deepstack.0
    assert err.stage == "vision" and "did not return 'item.0.deepstack.0'" in err.message


def test_an_audio_answer_missing_a_clip_is_internal_naming_audio() -> None:
    async def run() -> StageFault:
        server = grpc.aio.server()
        audio_pb2_grpc.add_AudioServicer_to_server(WrongAudio(lambda: []), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                client = AudioClient(channel, Metrics("gateway", "t"))
                with pytest.raises(StageFault) as e:
                    await asyncio.wait_for(client.encode("r", [torch.zeros(1600)], timeout=10), 10)
                return e.value
        finally:
            await server.stop(None)

    err = asyncio.run(run())
    assert err.stage == "audio" and "did not return 'clip.0.embeddings'" in err.message
