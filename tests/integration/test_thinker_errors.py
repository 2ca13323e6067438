"""The thinker's Generate rejects malformed requests with INVALID_ARGUMENT naming the field; keepalive is tolerated."""
from __future__ import annotations

import asyncio
import time

import grpc
import pytest
import torch

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc
from runtime.tensor_codec import encode_tensor
from tests.integration.mesh_process import Proc

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
IMAGE_PAD = 151655
HIDDEN = 64


def start(**fields: object) -> thinker_pb2.GenerateRequest:
    fields.setdefault("token_ids", PROMPT)
    fields.setdefault("sampling", common_pb2.SamplingParams(max_tokens=2, temperature=0))
    return thinker_pb2.GenerateRequest(start=thinker_pb2.GenerateStart(request_id="t", **fields))


def image_prompt() -> list[int]:
    return [151644, 872, 198, 151652, *[IMAGE_PAD] * 4, 151653, 151645, 198, 151644, 77091, 198]


def audio_in_video_prompt() -> list[int]:
    """<|vision_start|><|audio_start|> V A V A V V <|audio_end|><|vision_end|> in a user turn."""
    body = [151656, 151675, 151656, 151675, 151656, 151656]
    return [151644, 872, 198, 151652, 151669, *body, 151670, 151653, 151645, 198, 151644, 77091, 198]


IMAGE_SPAN = thinker_pb2.MediaSpan(kind=thinker_pb2.MEDIA_KIND_IMAGE, offset=4, length=4, grid_thw=[1, 4, 4])


def media(name: str, t: torch.Tensor) -> list[thinker_pb2.GenerateRequest]:
    return [thinker_pb2.GenerateRequest(media=c) for c in encode_tensor(name, t)]


def tensors_for_image(rows: int = 4) -> list[thinker_pb2.GenerateRequest]:
    msgs = media("media.0.embeddings", torch.zeros(rows, HIDDEN))
    for k in range(3):
        msgs += media(f"media.0.deepstack.{k}", torch.zeros(rows, HIDDEN))
    return msgs


CASES = {
    "start": [thinker_pb2.GenerateRequest(media=common_pb2.Tensor(name="x"))],
    "start.token_ids": [start(token_ids=[])],
    "start.token_ids ": [start(token_ids=[1, 10**7])],
    "start.media[0]": [start(token_ids=image_prompt(), media=[thinker_pb2.MediaSpan(
        kind=thinker_pb2.MEDIA_KIND_IMAGE, offset=2, length=4, grid_thw=[1, 4, 4])])],
    "start.media[0].kind": [start(token_ids=image_prompt(), media=[thinker_pb2.MediaSpan(offset=4, length=4)])],
    "start.media[0].grid_thw": [start(token_ids=image_prompt(), media=[thinker_pb2.MediaSpan(
        kind=thinker_pb2.MEDIA_KIND_IMAGE, offset=4, length=4)])],
    "start.media[0] ": [start(token_ids=image_prompt(), media=[thinker_pb2.MediaSpan(
        kind=thinker_pb2.MEDIA_KIND_IMAGE, offset=4, length=40, grid_thw=[1, 4, 4])])],
    "media[media.0.embeddings]": [start(token_ids=image_prompt(), media=[IMAGE_SPAN])],
    "media[media.0.embeddings] ": [start(token_ids=image_prompt(), media=[IMAGE_SPAN]), *tensors_for_image(3)],
    "media[media.7.embeddings]": [start(token_ids=image_prompt(), media=[IMAGE_SPAN]),
                                  *media("media.7.embeddings", torch.zeros(4, HIDDEN))],  # not announced
    "media[media.0.embeddings]  ": [start(token_ids=image_prompt(), media=[IMAGE_SPAN]), *tensors_for_image(),
                                    *media("media.0.embeddings", torch.zeros(4, HIDDEN))],  # a second time
    "media[media.0.embeddings]   ": [start(token_ids=image_prompt(), media=[IMAGE_SPAN]),
                                     *media("media.0.embeddings", torch.zeros(4, HIDDEN, dtype=torch.int32))],
    "start ": [start(), start()],
    "media": [start(token_ids=image_prompt(), media=[IMAGE_SPAN]), tensors_for_image()[0].__class__(
        media=common_pb2.Tensor(name="media.0.embeddings", dtype=common_pb2.DTYPE_FLOAT32, shape=[4, HIDDEN],
                                data=b"\0" * 16, chunk_index=0, chunk_count=2))],
    "start.sampling.top_p": [start(sampling=common_pb2.SamplingParams(top_p=0))],
    "start.token_ids  ": [start(token_ids=[9707] * 1024)],
    "start.media[0].audio_length": [start(token_ids=audio_in_video_prompt(), media=[thinker_pb2.MediaSpan(
        kind=thinker_pb2.MEDIA_KIND_AUDIO_IN_VIDEO, offset=5, length=6, grid_thw=[2, 2, 2], second_per_grid=1.0,
        audio_length=3)])],
    "start.media[0]  ": [start(token_ids=audio_in_video_prompt(), media=[thinker_pb2.MediaSpan(
        kind=thinker_pb2.MEDIA_KIND_AUDIO_IN_VIDEO, offset=4, length=6, grid_thw=[2, 2, 2], second_per_grid=1.0,
        audio_length=2)])],
}


async def generate(addr: str, messages: list[thinker_pb2.GenerateRequest], **kw: object) -> list:
    async def it():
        for m in messages:
            yield m

    async with grpc.aio.insecure_channel(addr) as channel:
        return [r async for r in thinker_pb2_grpc.ThinkerStub(channel).Generate(it(), **kw)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_generate_is_invalid_argument(mesh: Proc, case: str) -> None:
    addr = f"127.0.0.1:{mesh.ports['thinker']['grpc_port']}"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        asyncio.run(generate(addr, CASES[case]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(case.strip()), err.value.details()


def test_image_prompt_with_its_embeddings_generates(mesh: Proc) -> None:
    addr = f"127.0.0.1:{mesh.ports['thinker']['grpc_port']}"
    out = asyncio.run(generate(addr, [start(token_ids=image_prompt(), media=[IMAGE_SPAN]), *tensors_for_image()]))
    assert out[-1].finished.usage.completion_tokens == 2


def test_aggressive_client_keepalive_survives_a_silent_stream(mesh: Proc) -> None:
    """A client pinging every second while the server is silent for 3 s is not cut off (docs/grpc-transport.md)."""
    addr = f"127.0.0.1:{mesh.ports['thinker']['grpc_port']}"

    async def scenario() -> list:
        async def it():
            yield start()
            await asyncio.sleep(3.0)  # the thinker waits for media: the stream is silent

        options = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_permit_without_calls", 1),
                   ("grpc.http2.max_pings_without_data", 0)]
        async with grpc.aio.insecure_channel(addr, options=options) as channel:
            return [r async for r in thinker_pb2_grpc.ThinkerStub(channel).Generate(it())]

    out = asyncio.run(scenario())
    assert out[-1].HasField("finished")


def test_a_client_still_writing_when_refused_reads_the_refusal(mesh: Proc) -> None:
    """A stream refused at its first chunk while the client has 64 MiB more to send: without the server reading
    what follows for a moment, the client's next write fails and grpc reports INTERNAL in place of our status."""
    addr = f"127.0.0.1:{mesh.ports['thinker']['grpc_port']}"
    tail = media("media.0.deepstack.0", torch.zeros(4, HIDDEN))[0]
    tail.media.data = b"\0" * (1 << 20)  # never parsed: the stream was refused before it
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            asyncio.run(generate(addr, [start(token_ids=image_prompt(), media=[IMAGE_SPAN]),
                                        *tensors_for_image(3)[:1], *[tail] * 64]))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert err.value.details().startswith("media[media.0.embeddings]")


def test_a_refused_client_that_never_half_closes_gets_the_refusal_after_the_drain(mesh: Proc) -> None:
    """The drain before a refusal is bounded: a client that keeps its stream open still gets INVALID_ARGUMENT,
    about REFUSED_STREAM_DRAIN_S later, not never."""
    from runtime.interceptor import REFUSED_STREAM_DRAIN_S

    addr = f"127.0.0.1:{mesh.ports['thinker']['grpc_port']}"

    async def scenario() -> None:
        async def it():
            yield start(token_ids=[])
            await asyncio.sleep(30)

        async with grpc.aio.insecure_channel(addr) as channel:
            async for _ in thinker_pb2_grpc.ThinkerStub(channel).Generate(it()):
                pass

    t0 = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        asyncio.run(asyncio.wait_for(scenario(), 10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("start.token_ids")
    assert REFUSED_STREAM_DRAIN_S * 0.9 <= time.monotonic() - t0 < REFUSED_STREAM_DRAIN_S + 5
