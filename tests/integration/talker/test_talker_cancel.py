"""A client that goes away mid-stream frees its talker row at once; requests past max_rows wait for a row."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, talker_pb2, talker_pb2_grpc
from tests.integration.mesh_process import Proc
from tests.integration.talker.conftest import MAX_ROWS
from tests.integration.talker.talker_calls import TOKENS, conditioning, metric, speak, start, text, text_end, text_only


class OpenSpeak:
    """A Speak call whose messages the test sends when it likes; the thinker 'keeps writing' until told."""

    def __init__(self, stub: talker_pb2_grpc.TalkerStub) -> None:
        self._outbox: asyncio.Queue[talker_pb2.SpeakRequest | None] = asyncio.Queue()
        self.call = stub.Speak(self._requests())

    async def _requests(self) -> AsyncIterator[talker_pb2.SpeakRequest]:
        while (msg := await self._outbox.get()) is not None:
            yield msg

    def send(self, *msgs: talker_pb2.SpeakRequest) -> None:
        for m in msgs:
            self._outbox.put_nowait(m)

    async def read(self) -> talker_pb2.SpeakResponse:
        return await asyncio.wait_for(self.call.read(), timeout=30)


async def _until(metrics_port: int, name: str, value: float, timeout: float = 10.0, **labels: str) -> None:
    deadline = time.monotonic() + timeout
    while (got := metric(metrics_port, name, **labels)) != value:
        assert time.monotonic() < deadline, f"{name} stayed {got}, expected {value}"
        await asyncio.sleep(0.01)


def _begin(call: OpenSpeak) -> None:
    """Start, the empty conditioning, and enough text for the first chunk; the text does not end."""
    call.send(start(), *conditioning(torch.empty(0, 0)), text(TOKENS[:6]))


def _assert_healthy(stage: Proc, addr: str) -> None:
    async def check() -> health_pb2.HealthCheckResponse:
        async with grpc.aio.insecure_channel(addr) as channel:
            return await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())

    assert asyncio.run(check()).status == health_pb2.HealthCheckResponse.SERVING
    assert asyncio.run(speak(addr, text_only())).finished.num_frames > 0
    port = stage.ports["metrics_port"]
    assert metric(port, "omnimesh_requests_running") == 0 and metric(port, "omnimesh_queue_depth") == 0
    assert stage.proc.poll() is None


def test_cancel_mid_stream_frees_the_row(talker_stage: Proc, talker_addr: str) -> None:
    port = talker_stage.ports["metrics_port"]

    async def run() -> None:
        async with grpc.aio.insecure_channel(talker_addr) as channel:
            call = OpenSpeak(talker_pb2_grpc.TalkerStub(channel))
            _begin(call)
            first = await call.read()
            assert first.WhichOneof("msg") == "audio"
            await _until(port, "omnimesh_requests_running", 1)  # waiting for more text, holding its row
            call.call.cancel()
            await _until(port, "omnimesh_requests_running", 0)

    asyncio.run(run())
    cancelled = metric(port, "omnimesh_grpc_server_handled_total", grpc_method="Speak", grpc_code="CANCELLED")
    assert cancelled >= 1
    _assert_healthy(talker_stage, talker_addr)


def test_requests_past_max_rows_wait_for_a_row(talker_stage: Proc, talker_addr: str) -> None:
    """MAX_ROWS open answers hold every row; one more waits in the queue, and starts when a row is freed by a
    client that goes away; a queued request can be cancelled too."""
    port = talker_stage.ports["metrics_port"]

    async def run() -> None:
        async with grpc.aio.insecure_channel(talker_addr) as channel:
            stub = talker_pb2_grpc.TalkerStub(channel)
            holders = [OpenSpeak(stub) for _ in range(MAX_ROWS)]
            for h in holders:
                _begin(h)
            for h in holders:
                assert (await h.read()).WhichOneof("msg") == "audio"
            waiting, dropped = OpenSpeak(stub), OpenSpeak(stub)
            _begin(waiting)
            _begin(dropped)
            await _until(port, "omnimesh_queue_depth", 2)
            dropped.call.cancel()
            await _until(port, "omnimesh_queue_depth", 1)
            holders[0].call.cancel()  # frees a row: the waiting request takes it
            assert (await waiting.read()).WhichOneof("msg") == "audio"
            assert metric(port, "omnimesh_queue_depth") == 0
            waiting.send(text(TOKENS[6:]), text_end(), None)
            while (last := await waiting.read()).WhichOneof("msg") == "audio":
                pass
            assert last.WhichOneof("msg") == "finished"
            for h in holders[1:]:
                h.call.cancel()
            await _until(port, "omnimesh_requests_running", 0)

    asyncio.run(run())
    _assert_healthy(talker_stage, talker_addr)


def test_talker_that_finishes_before_the_thinker(talker_stage: Proc, talker_addr: str) -> None:
    """The talker stops (max frames) while the thinker still writes: finished comes, the text still open is
    dropped, the server ends the call OK, and the stage stays healthy.

    The server's own count decides "OK": the client's status can read INTERNAL ("Internal error from Core")
    when its late write races the closing call, a grpc client artifact (the gateway stops at `finished`)."""
    port = talker_stage.ports["metrics_port"]
    handled = {code: _handled(port, code) for code in ("OK", "INTERNAL")}

    async def run() -> talker_pb2.SpeakFinished:
        async with grpc.aio.insecure_channel(talker_addr) as channel:
            call = OpenSpeak(talker_pb2_grpc.TalkerStub(channel))
            call.send(start(talker_sampling=common_pb2.SamplingParams(temperature=0, max_tokens=3)),
                      *conditioning(torch.empty(0, 0)), text(TOKENS))
            while (last := await call.read()).WhichOneof("msg") == "audio":
                pass
            call.send(text([5, 6]))  # the thinker is not done yet
            await _until(port, "omnimesh_grpc_server_handled_total", handled["OK"] + 1,
                         grpc_method="Speak", grpc_code="OK")
            return last.finished

    finished = asyncio.run(run())
    assert finished.num_frames == 3 and finished.finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert _handled(port, "INTERNAL") == handled["INTERNAL"]
    _assert_healthy(talker_stage, talker_addr)


def test_a_full_talker_answers_resource_exhausted(demo_ckpt, tmp_path) -> None:
    """One row and no queue: a second request is refused at once, with the limits named."""
    import asyncio

    import grpc

    from tests.integration.mesh_process import start_stage
    from tests.integration.talker.talker_calls import start, text, text_end

    mesh = {"talker": {"enabled": True, "speech": {"max_rows": 1, "max_waiting": 0, "max_frames": 200}}}
    talker = start_stage("talker", demo_ckpt, mesh, tmp_path)
    addr = f"127.0.0.1:{talker.ports['grpc_port']}"

    async def scenario() -> grpc.aio.AioRpcError:
        from omnimesh.v1 import talker_pb2_grpc

        async def hold():  # starts speaking and keeps its row: its text never ends
            yield start()
            yield text(range(1000, 1040))
            await asyncio.sleep(30)

        async def second():
            yield start()
            yield text_end()

        async with grpc.aio.insecure_channel(addr) as channel:
            stub = talker_pb2_grpc.TalkerStub(channel)
            busy = stub.Speak(hold())
            await busy.read()  # its first audio: the row is taken
            try:
                async for _ in stub.Speak(second()):
                    pass
            except grpc.aio.AioRpcError as err:
                return err
            finally:
                busy.cancel()
        raise AssertionError("a second request was admitted past max_rows + max_waiting")

    try:
        err = asyncio.run(scenario())
    finally:
        assert talker.stop() == 0
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_waiting" in err.details()


def _handled(port: int, code: str) -> float:
    """Speak calls the server ended with `code` so far (0 before the first: the series appears with it)."""
    try:
        return metric(port, "omnimesh_grpc_server_handled_total", grpc_method="Speak", grpc_code=code)
    except KeyError:
        return 0.0
