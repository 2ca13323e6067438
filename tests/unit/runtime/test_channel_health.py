"""Stage channels balance only over replicas that report SERVING: a replica that turns NOT_SERVING (its engine
failed, or it drains on SIGTERM) gets no new calls from this client at once, before Kubernetes has taken it out of
DNS. Two real grpc.aio servers on loopback play two thinker replicas that answer Info with their names."""
from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from omnimesh.v1 import common_pb2, thinker_pb2_grpc
from runtime.channels import open_channel


class NamedReplica(thinker_pb2_grpc.ThinkerServicer):
    def __init__(self, name: str) -> None:
        self.name = name

    async def Info(self, request: common_pb2.InfoRequest, context: grpc.aio.ServicerContext) -> common_pb2.StageInfo:
        return common_pb2.StageInfo(stage="thinker", replica=self.name)


async def _replica(name: str) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    server, servicer = grpc.aio.server(), health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    thinker_pb2_grpc.add_ThinkerServicer_to_server(NamedReplica(name), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, servicer, port


def test_a_replica_that_reports_not_serving_gets_no_new_calls() -> None:
    async def main() -> list[list[str]]:
        (a, a_health, a_port), (b, _, b_port) = await _replica("a"), await _replica("b")
        try:
            async with open_channel(f"ipv4:127.0.0.1:{a_port},127.0.0.1:{b_port}") as channel:
                stub = thinker_pb2_grpc.ThinkerStub(channel)

                async def answered(calls: int = 20) -> list[str]:
                    return sorted({(await stub.Info(common_pb2.InfoRequest(), timeout=5)).replica
                                   for _ in range(calls)})

                async def settled(expected: list[str]) -> list[str]:
                    """What 20 calls reach once the channel's health watch has heard the change (within 5 s)."""
                    for _ in range(50):
                        if (got := await answered()) == expected:
                            break
                        await asyncio.sleep(0.1)
                    return got

                seen = [await answered()]
                await a_health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
                seen.append(await settled(["b"]))
                await a_health.set("", health_pb2.HealthCheckResponse.SERVING)
                seen.append(await settled(["a", "b"]))
                return seen
        finally:
            await a.stop(None)
            await b.stop(None)

    assert asyncio.run(main()) == [["a", "b"], ["b"], ["a", "b"]]
