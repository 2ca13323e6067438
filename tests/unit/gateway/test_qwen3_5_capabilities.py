"""A Qwen3.5 deployment's gateway on real gRPC (loopback): audio input, speech output and Transcribe are
UNIMPLEMENTED naming what it serves, answered before any stage is called (none listens here)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from omnimesh.v1 import omni_pb2, omni_pb2_grpc
from runtime.config import MeshConfig, ServerConfig
from runtime.metrics import Metrics
from runtime.server import StageServer
from gateway.build import build_gateway
from gateway.cli.up import only_stages_of

NOWHERE = "127.0.0.1:9"  # no stage listens: a request that reached one would fail UNAVAILABLE, not UNIMPLEMENTED


@asynccontextmanager
async def gateway(ckpt: Path) -> AsyncIterator[omni_pb2_grpc.OmniStub]:
    mesh = only_stages_of(MeshConfig(model=str(ckpt)), ckpt)
    mesh = replace(mesh, thinker=replace(mesh.thinker, address=NOWHERE),
                   vision=replace(mesh.vision, address=NOWHERE))
    server = StageServer("gateway", "t", ServerConfig(port=0, metrics_port=-1), Metrics("gateway", "t"))
    close = await build_gateway(mesh, ckpt, server)
    ports = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc_port}") as channel:
            yield omni_pb2_grpc.OmniStub(channel)
    finally:
        close()
        await server.stop(0)


def user(*parts: omni_pb2.ContentPart) -> list[omni_pb2.Message]:
    return [omni_pb2.Message(role="user", content=list(parts))]


async def error_of(call: AsyncIterator[object]) -> tuple[grpc.StatusCode, str]:
    try:
        [_ async for _ in call]
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


async def answers(ckpt: Path) -> list[tuple[grpc.StatusCode, str]]:
    text = omni_pb2.ContentPart(text="hi")
    audio = omni_pb2.ContentPart(audio=omni_pb2.Media(data=b"RIFF....WAVE"))
    async with gateway(ckpt) as stub:
        calls = [stub.Chat(omni_pb2.ChatRequest(messages=user(audio, text)), timeout=10),
                 stub.Chat(omni_pb2.ChatRequest(messages=user(text), output_modalities=[
                     omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO]), timeout=10),
                 stub.Transcribe(omni_pb2.TranscribeRequest(audio=omni_pb2.Media(data=b"RIFF....WAVE")), timeout=10)]
        return [await error_of(call) for call in calls]


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_audio_in_speech_out_and_transcribe_are_unimplemented(moe: bool, request: pytest.FixtureRequest) -> None:
    ckpt = request.getfixturevalue("qwen3_5_moe_ckpt" if moe else "qwen3_5_ckpt")
    audio_in, speech_out, transcribe = asyncio.run(answers(ckpt))
    unimplemented = grpc.StatusCode.UNIMPLEMENTED
    assert audio_in == (unimplemented, "messages[0].content[0].audio: audio input is not served by this deployment "
                                       "(it serves image, video)")
    assert speech_out[0] == unimplemented and "audio output is not served" in speech_out[1]
    assert "it serves text output only" in speech_out[1]
    assert transcribe[0] == unimplemented and "this deployment serves qwen3.5, not a Qwen3-ASR model" in transcribe[1]
