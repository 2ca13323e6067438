"""The gateway's talker client ends an answer at `finished`, without waiting on the call's status.

A real grpc.aio server on loopback plays a talker that sends `finished` and then keeps the call open (as a
talker does while the gateway still writes thinker text to it): the client must be done at once, and must
not turn a race on the closing call into an error for an answer that is complete.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from omnimesh.v1 import common_pb2, talker_pb2, talker_pb2_grpc
from gateway.clients.talker import SpeakSetup, SpeechDone, TalkerClient, TalkerFeed
from runtime.metrics import Metrics


class FinishesThenLingers(talker_pb2_grpc.TalkerServicer):
    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def Speak(self, request_iterator: AsyncIterator[talker_pb2.SpeakRequest],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[talker_pb2.SpeakResponse]:
        await request_iterator.__anext__()  # the start message
        yield talker_pb2.SpeakResponse(audio=common_pb2.AudioChunk(pcm16=b"\0\0" * 4))
        yield talker_pb2.SpeakResponse(finished=talker_pb2.SpeakFinished(num_frames=3))
        try:
            await asyncio.sleep(30)  # never ends on its own within the test
        finally:
            self.closed.set()


def test_speak_ends_at_finished_without_waiting_for_the_status() -> None:
    async def run() -> list[object]:
        server = grpc.aio.server()
        servicer = FinishesThenLingers()
        talker_pb2_grpc.add_TalkerServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                client = TalkerClient(channel, Metrics("gateway", "t"))
                feed = TalkerFeed()
                feed.tokens([5, 6])  # the thinker is still writing
                setup = SpeakSetup("r", "ethan", [1, 2], [], False)
                items = await asyncio.wait_for(_collect(client.speak(setup, feed, timeout=60)), 5)
                await asyncio.wait_for(servicer.closed.wait(), 5)  # leaving cancelled the lingering call
                return items
        finally:
            await server.stop(None)

    items = asyncio.run(run())
    assert len(items) == 2 and isinstance(items[1], SpeechDone) and items[1].num_frames == 3


async def _collect(stream: AsyncIterator[object]) -> list[object]:
    return [item async for item in stream]
