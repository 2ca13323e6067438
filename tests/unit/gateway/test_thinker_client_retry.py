"""A replica that fails UNAVAILABLE before answering (dead, its health watch not yet told) is suspected and the
request goes to another; one that fails after answering fails the stream, as the client must see."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc
from gateway.clients.thinker import ThinkerClient, ThinkerDone, ThinkerPrompt
from gateway.routing.router import ThinkerRouter
from runtime.engine.sampling_params import SamplingOptions
from runtime.errors import Unavailable
from runtime.metrics import Metrics


class FakeThinker(thinker_pb2_grpc.ThinkerServicer):
    """Answers UNAVAILABLE after `fail_after` token batches (None: never fails)."""

    def __init__(self, fail_after: int | None) -> None:
        self.fail_after = fail_after
        self.calls = 0

    async def Generate(self, request_iterator: AsyncIterator[thinker_pb2.GenerateRequest],
                       context: grpc.aio.ServicerContext) -> AsyncIterator[thinker_pb2.GenerateResponse]:
        self.calls += 1
        async for _ in request_iterator:
            pass
        for i in range(2):
            if self.fail_after == i:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")
            yield thinker_pb2.GenerateResponse(tokens=thinker_pb2.TokenBatch(token_ids=[i], text=str(i)))
        yield thinker_pb2.GenerateResponse(finished=thinker_pb2.GenerateFinished(
            finish_reason=common_pb2.FINISH_REASON_STOP, usage=common_pb2.Usage(completion_tokens=2)))


async def serve(thinker: FakeThinker) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    status = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(status, server)
    thinker_pb2_grpc.add_ThinkerServicer_to_server(thinker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await status.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, f"127.0.0.1:{port}"


async def run(fail_after: int | None) -> tuple[list, FakeThinker, FakeThinker, bool]:
    bad, good = FakeThinker(fail_after), FakeThinker(None)
    (s1, a1), (s2, a2) = await serve(bad), await serve(good)
    # least_load with both idle picks the first listed: the failing one
    router = ThinkerRouter((a1, a2), lambda ep: grpc.aio.insecure_channel(ep.target), "least_load", 8,
                           Metrics("gateway", "g"), wait_s=5.0, resolve_s=10.0)
    await router.start()
    while not all(r.serving for r in router.replicas.values()):
        await asyncio.sleep(0.02)
    client = ThinkerClient(router, Metrics("gateway", "g"))
    out: list = []
    try:
        async for item in client.generate(ThinkerPrompt("r1", [1, 2, 3]), SamplingOptions(), False, 5.0):
            out.append(item)
    except Unavailable as err:
        out.append(err)
    suspected = not router.replicas[a1].serving
    await router.close()
    await s1.stop(0)
    await s2.stop(0)
    return out, bad, good, suspected


def test_a_replica_failing_before_its_first_answer_is_skipped() -> None:
    out, bad, good, suspected = asyncio.run(run(fail_after=0))
    assert (bad.calls, good.calls) == (1, 1) and suspected
    assert [c.token_ids for c in out[:2]] == [[0], [1]] and isinstance(out[-1], ThinkerDone)


def test_a_replica_failing_mid_answer_fails_the_stream() -> None:
    out, bad, good, suspected = asyncio.run(run(fail_after=1))
    assert (bad.calls, good.calls) == (1, 0) and suspected
    assert out[0].token_ids == [0] and isinstance(out[-1], Unavailable) and "UNAVAILABLE" in out[-1].message
