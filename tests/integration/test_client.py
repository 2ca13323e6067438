"""omnimesh.Client and AsyncClient against a real text-only mesh: streams, replies, logprobs with token text, errors as
exceptions with the gRPC status and field violations."""
from __future__ import annotations

import asyncio
import socket

import grpc
import pytest

import omnimesh
from omnimesh import AsyncClient, Client, Done, Message, Sampling, TextDelta, Usage

TOKENS = 6


def test_chat_gathers_text_usage_and_logprobs_with_token_text(gateway_addr: str) -> None:
    with Client(gateway_addr, timeout=60) as client:
        reply = client.chat("Hello", max_tokens=TOKENS, ignore_eos=True, seed=1, logprobs=True, top_logprobs=2)
    assert reply.finish_reason == "length" and reply.usage is not None
    assert reply.usage.completion_tokens == TOKENS == len(reply.token_ids) == len(reply.logprobs)
    assert [lp.token_id for lp in reply.logprobs] == reply.token_ids
    assert b"".join(lp.bytes for lp in reply.logprobs).decode("utf-8", "replace") == reply.text
    for lp in reply.logprobs:
        assert lp.token == lp.bytes.decode("utf-8", "replace") and lp.logprob <= 0
        assert len(lp.top) == 2 and lp.top[0].logprob >= lp.top[1].logprob and all(t.bytes for t in lp.top)


def test_stream_orders_text_then_usage_then_done(gateway_addr: str) -> None:
    with Client(gateway_addr, timeout=60) as client:
        events = list(client.chat_stream([Message.system("Be brief."), {"role": "user", "content": "Hi"}],
                                         sampling=Sampling(max_tokens=TOKENS, ignore_eos=True, temperature=0.0)))
    kinds = [type(e) for e in events]
    assert kinds[-2:] == [Usage, Done] and set(kinds[:-2]) == {TextDelta}
    assert sum(len(e.token_ids) for e in events if isinstance(e, TextDelta)) == TOKENS


def test_leaving_a_stream_early_cancels_it_and_the_client_goes_on(gateway_addr: str) -> None:
    with Client(gateway_addr, timeout=60) as client:
        for event in client.chat_stream("Tell me a long story", max_tokens=200, ignore_eos=True):
            assert isinstance(event, TextDelta)
            break
        assert client.chat("Hi", max_tokens=2).finish_reason in ("stop", "length")


def test_async_client_streams_and_gathers(gateway_addr: str) -> None:
    async def run() -> tuple[list, omnimesh.Reply, omnimesh.MeshInfo]:
        async with AsyncClient(gateway_addr, timeout=60) as client:
            events = [e async for e in client.chat_stream("Hello", max_tokens=TOKENS, ignore_eos=True)]
            reply = await client.chat("Hello", max_tokens=TOKENS, ignore_eos=True, temperature=0.0)
            return events, reply, await client.info()

    events, reply, info = asyncio.run(run())
    assert isinstance(events[-1], Done) and reply.usage.completion_tokens == TOKENS
    assert info.input_modalities == ("text",) and info.output_modalities == ("text",) and info.build
    assert info.model_family == "qwen3-omni" and not info.transcribes


def test_a_bad_field_raises_invalid_argument_naming_it(gateway_addr: str) -> None:
    with Client(gateway_addr, timeout=60) as client, pytest.raises(omnimesh.InvalidArgument) as caught:
        client.chat("Hi", top_p=7.0)
    err = caught.value
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT and "top_p" in err.message
    assert [v.field for v in err.field_violations] == ["sampling.top_p"]


def test_speech_from_a_text_only_mesh_is_unimplemented(gateway_addr: str) -> None:
    async def run() -> None:
        async with AsyncClient(gateway_addr, timeout=60) as client:
            await client.chat("Hi", speak=True)

    with pytest.raises(omnimesh.Unimplemented, match="audio output"):
        asyncio.run(run())


def test_a_gateway_that_is_down_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    with Client(f"127.0.0.1:{port}", timeout=5) as client, pytest.raises(omnimesh.Unavailable) as caught:
        client.chat("Hi")
    assert caught.value.code is grpc.StatusCode.UNAVAILABLE


def test_an_unknown_sampling_field_is_a_type_error(gateway_addr: str) -> None:
    with Client(gateway_addr) as client, pytest.raises(TypeError, match="top_q"):
        client.chat("Hi", top_q=0.5)


def test_transcription_is_unimplemented_on_qwen3_omni(gateway_addr: str) -> None:
    with Client(gateway_addr, timeout=60) as client:
        with pytest.raises(omnimesh.Unimplemented, match="not a Qwen3-ASR model"):
            client.transcribe(b"RIFF", language="en")
        with pytest.raises(omnimesh.Unimplemented, match="not a Qwen3-ASR model"):
            list(client.transcribe_pcm_stream([b"\0\0"], 16_000))

    async def run() -> None:
        async def recording():
            yield b"\0\0"

        async with AsyncClient(gateway_addr, timeout=60) as client:
            with pytest.raises(omnimesh.Unimplemented):
                [e async for e in client.transcribe_pcm_stream(recording(), 16_000)]

    asyncio.run(run())
