"""A small grpc.aio client of the public API for integration tests."""
from __future__ import annotations

import asyncio

import grpc

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc


def chat_request(text: str, sampling: common_pb2.SamplingParams | None = None, role: str = "user",
                 **fields: object) -> omni_pb2.ChatRequest:
    msg = omni_pb2.Message(role=role, content=[omni_pb2.ContentPart(text=text)])
    return omni_pb2.ChatRequest(messages=[msg], sampling=sampling or common_pb2.SamplingParams(), **fields)


async def collect(stub: omni_pb2_grpc.OmniStub, request: omni_pb2.ChatRequest, **call_kwargs: object
                  ) -> tuple[list[int], list[omni_pb2.ChatEvent]]:
    events = [ev async for ev in stub.Chat(request, **call_kwargs)]
    tokens = [t for ev in events if ev.HasField("text") for t in ev.text.token_ids]
    return tokens, events


async def run_concurrent(addr: str, requests: list[omni_pb2.ChatRequest]) -> list[tuple[list[int], list]]:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)
        return list(await asyncio.gather(*(collect(stub, r) for r in requests)))


async def chat_error(addr: str, request: omni_pb2.ChatRequest, **call_kwargs: object) -> grpc.aio.AioRpcError:
    """The error a request ends with; fails the test if it succeeds."""
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)
        try:
            await collect(stub, request, **call_kwargs)
        except grpc.aio.AioRpcError as err:
            return err
    raise AssertionError("the request succeeded; an error was expected")
