"""Every error the public API promises, each through the real gateway, with the field named."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess

import grpc
import pytest
import yaml
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from tests.integration.client import chat_error, chat_request, collect
from tests.integration.conftest import TEST_MESH, python_module
from tests.integration.mesh_process import Proc, start
from tests.integration.status_checks import violated_fields



def text_part(text: str) -> omni_pb2.ContentPart:
    return omni_pb2.ContentPart(text=text)


BAD_REQUESTS = {
    "messages": omni_pb2.ChatRequest(),
    "messages[0].role": omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="robot", content=[text_part("hi")])]),
    "messages[0].content": omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user")]),
    "messages[0].content[0]": omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user",
                                                                              content=[omni_pb2.ContentPart()])]),
    "sampling.temperature": chat_request("hi", common_pb2.SamplingParams(temperature=-0.5)),
    "sampling.top_p": chat_request("hi", common_pb2.SamplingParams(top_p=1.5)),
    "sampling.top_k": chat_request("hi", common_pb2.SamplingParams(top_k=-1)),
    "sampling.max_tokens": chat_request("hi", common_pb2.SamplingParams(max_tokens=0)),
    "messages[1].content[0].image.data": omni_pb2.ChatRequest(messages=[
        omni_pb2.Message(role="user", content=[text_part("a")]),
        omni_pb2.Message(role="user", content=[omni_pb2.ContentPart(image=omni_pb2.Media())])]),
}


@pytest.mark.parametrize("field", sorted(BAD_REQUESTS))
def test_bad_input_is_invalid_argument_naming_the_field(gateway_addr: str, field: str) -> None:
    err = asyncio.run(chat_error(gateway_addr, BAD_REQUESTS[field]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(err) == [field]
    assert field in err.details()


def test_prompt_longer_than_the_context_is_invalid_argument(gateway_addr: str) -> None:
    err = asyncio.run(chat_error(gateway_addr, chat_request("hello " * 1100)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(err) == ["messages"]
    assert "1024" in err.details()


@pytest.mark.parametrize("kind", ["image", "audio", "video"])
def test_media_input_not_yet_served_is_unimplemented(gateway_addr: str, kind: str) -> None:
    part = omni_pb2.ContentPart(**{kind: omni_pb2.Media(data=b"\x89PNG....")})
    req = omni_pb2.ChatRequest(messages=[omni_pb2.Message(role="user", content=[part, text_part("what is it?")])])
    err = asyncio.run(chat_error(gateway_addr, req))
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED
    assert f"messages[0].content[0].{kind}" in err.details()


def test_audio_output_not_yet_served_is_unimplemented(gateway_addr: str) -> None:
    req = chat_request("say hi", output_modalities=[omni_pb2.MODALITY_TEXT, omni_pb2.MODALITY_AUDIO])
    err = asyncio.run(chat_error(gateway_addr, req))
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "audio output" in err.details()


def test_unspecified_output_modality_is_invalid_argument(gateway_addr: str) -> None:
    err = asyncio.run(chat_error(gateway_addr, chat_request("hi", output_modalities=[omni_pb2.MODALITY_UNSPECIFIED])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violated_fields(err) == ["output_modalities"]


def test_deadline_shorter_than_the_answer_is_deadline_exceeded(gateway_addr: str) -> None:
    req = chat_request("hi", common_pb2.SamplingParams(max_tokens=1000, ignore_eos=True))
    err = asyncio.run(chat_error(gateway_addr, req, timeout=0.5))
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(demo_ckpt, mesh_config, thinker_addr: str, env: dict[str, str] | None = None) -> Proc:
    from runtime.server import READY_PREFIX

    cmd = python_module("gateway", "--model", str(demo_ckpt), "--config", str(mesh_config), "--port", "0",
                        "--metrics-port", "-1", "--thinker-addr", thinker_addr)
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        return start(cmd, READY_PREFIX, timeout=60)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_streams_past_max_in_flight_are_resource_exhausted(demo_ckpt, tmp_path, mesh: Proc) -> None:
    """With max_in_flight 1, a second stream while the first is open is refused with RetryInfo; once the first
    ended, the next is served."""
    config = tmp_path / "mesh.yaml"
    config.write_text(yaml.safe_dump({**TEST_MESH, "gateway": {**TEST_MESH["gateway"], "max_in_flight": 1}}))
    gw = start_gateway(demo_ckpt, config, f"127.0.0.1:{mesh.ports['thinker']['grpc_port']}")
    addr = f"127.0.0.1:{gw.ports['grpc_port']}"

    async def second_while_first_open() -> grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(addr) as channel:
            first = omni_pb2_grpc.OmniStub(channel).Chat(chat_request("hi", common_pb2.SamplingParams(
                max_tokens=900, temperature=1.0)))
            await first.read()  # it is open: its first text arrived
            err = await chat_error(addr, chat_request("hi", common_pb2.SamplingParams(max_tokens=2)))
            first.cancel()
            return err

    try:
        err = asyncio.run(second_while_first_open())
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "holds 1 chat streams, its limit gateway.max_in_flight=1" in err.details()
        assert any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in rpc_status.from_call(err).details)
        assert asyncio.run(_served_once_freed(addr)) == 2
    finally:
        assert gw.stop() == 0


async def _served_once_freed(addr: str) -> int:
    """Tokens of a short request, retried while the gateway still counts a stream the client just cancelled."""
    req = chat_request("hi", common_pb2.SamplingParams(max_tokens=2))
    for _ in range(25):
        try:
            async with grpc.aio.insecure_channel(addr) as channel:
                tokens, _ = await collect(omni_pb2_grpc.OmniStub(channel), req)
                return len(tokens)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            await asyncio.sleep(0.2)
    raise AssertionError("the gateway kept refusing after the open stream was cancelled")


def test_a_gateway_without_a_thinker_address_says_so(demo_ckpt, mesh_config) -> None:
    run = subprocess.run(python_module("gateway", "--model", str(demo_ckpt), "--config", str(mesh_config), "--port",
                                       "0", "--metrics-port", "-1"), capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "config field thinker.address is empty" in run.stderr and "--thinker-addr" in run.stderr


def test_thinker_down_is_unavailable(demo_ckpt, mesh_config) -> None:
    gw = start_gateway(demo_ckpt, mesh_config, f"127.0.0.1:{free_port()}")
    try:
        err = asyncio.run(chat_error(f"127.0.0.1:{gw.ports['grpc_port']}", chat_request("hi")))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert "thinker" in err.details()
        with pytest.raises(grpc.RpcError) as caught:  # Info says which stage did not answer
            asyncio.run(_info(f"127.0.0.1:{gw.ports['grpc_port']}", None))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "thinker stage did not answer Info" in caught.value.details()
    finally:
        assert gw.stop() == 0


def test_api_keys_are_enforced(demo_ckpt, mesh_config, mesh: Proc) -> None:
    thinker = f"127.0.0.1:{mesh.ports['thinker']['grpc_port']}"
    gw = start_gateway(demo_ckpt, mesh_config, thinker, env={"OMNIMESH_API_KEYS": "k-one,k-two"})
    addr = f"127.0.0.1:{gw.ports['grpc_port']}"
    req = chat_request("hi", common_pb2.SamplingParams(max_tokens=3))
    try:
        for metadata in (None, [("authorization", "Bearer nope")], [("authorization", "Basic k-one")]):
            err = asyncio.run(chat_error(addr, req, metadata=metadata))
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        tokens, events = asyncio.run(_with_key(addr, req, "k-two"))
        assert len(tokens) == 3 and events[-1].HasField("done")
        for metadata in (None, [("authorization", "Bearer nope")]):  # Info is behind the keys too
            with pytest.raises(grpc.RpcError) as caught:
                asyncio.run(_info(addr, metadata))
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert asyncio.run(_info(addr, [("authorization", "Bearer k-one")])).gateway.stage == "gateway"
    finally:
        assert gw.stop() == 0


async def _info(addr: str, metadata: list[tuple[str, str]] | None) -> omni_pb2.OmniInfo:
    async with grpc.aio.insecure_channel(addr) as channel:
        return await omni_pb2_grpc.OmniStub(channel).Info(common_pb2.InfoRequest(), metadata=metadata, timeout=30)


async def _with_key(addr: str, req: omni_pb2.ChatRequest, key: str):
    async with grpc.aio.insecure_channel(addr) as channel:
        return await collect(omni_pb2_grpc.OmniStub(channel), req, metadata=[("authorization", f"Bearer {key}")])
