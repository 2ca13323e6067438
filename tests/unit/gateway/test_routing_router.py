"""The router's edges: targets it refuses at start, DNS names resolved per address (with the name kept for TLS),
and UNAVAILABLE naming the replicas when none serves."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway.routing.discovery import Endpoint, resolve, split_dns
from gateway.routing.router import ThinkerRouter
from runtime.errors import Unavailable
from runtime.metrics import Metrics


def test_dns_targets_need_a_port() -> None:
    assert split_dns("dns:///thinker-headless.ns.svc:50051") == ("thinker-headless.ns.svc", 50051)
    assert split_dns("127.0.0.1:5") is None
    with pytest.raises(ValueError, match="a DNS target needs a port, e.g. dns:///thinker-headless:50051"):
        split_dns("dns:///thinker-headless")


def test_a_dns_name_becomes_one_endpoint_per_address_and_others_stay_as_given() -> None:
    found = asyncio.run(resolve(("dns:///localhost:5000", "10.0.0.9:7", "dns:///no-such-host.invalid:1")))
    local = [e for e in found if e.authority == "localhost"]
    assert local and {e.target for e in local} <= {"127.0.0.1:5000", "[::1]:5000"}
    assert Endpoint("10.0.0.9:7", "") in found and len(found) == len(local) + 1  # the unresolvable name: none


def router(targets: tuple[str, ...], wait_s: float = 0.3) -> ThinkerRouter:
    return ThinkerRouter(targets, lambda ep: grpc.aio.insecure_channel(ep.target), "prefix_aware", 8,
                         Metrics("gateway", "g0"), wait_s, resolve_s=10.0)


def test_no_targets_or_a_malformed_one_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="thinker.address is empty"):
        router(())
    with pytest.raises(ValueError, match="needs a port"):
        router(("dns:///thinker",))


def test_no_serving_replica_is_unavailable_after_the_wait() -> None:
    async def run() -> Unavailable:
        r = router(("127.0.0.1:1",))  # nothing listens: never serving
        await r.start()
        try:
            with pytest.raises(Unavailable) as err:
                await r.route([1, 2, 3], (), reuses_cache=True)
            return err.value
        finally:
            await r.close()

    err = asyncio.run(run())
    assert "no thinker replica is serving (1 known: 127.0.0.1:1); waited 0.3 s" in err.message
    assert err.stage == "thinker"


def test_a_conversation_sticks_to_the_replica_that_took_its_first_turn() -> None:
    """Its prompt's blocks are expected there from the moment it is routed, before the replica reports them;
    a request that must compute its KV afresh (talker conditioning) goes by load alone."""
    from gateway.routing.replica import ThinkerReplica
    from runtime.engine.block_manager import prompt_block_keys

    async def run() -> list[tuple[str, str, int]]:
        r = router(("a:1", "b:1"))
        for name in ("a:1", "b:1"):
            rep = ThinkerReplica(name, grpc.aio.insecure_channel(name), lambda: None)
            rep.serving = True
            rep.index.apply(True, [], [], 4, True)
            r.replicas[name] = rep
        r.replicas["a:1"].in_flight = 1  # b is idle: a new prompt goes there
        turn1 = list(range(10))
        picks = []
        for prompt, reuse in ((turn1, True), (turn1 + [50, 51, 52, 53, 54], True), (turn1, False)):
            replica, choice = await r.route(prompt, (), reuses_cache=reuse)
            picks.append((replica.name, choice.decision, choice.prefix_blocks))
            replica.in_flight += 1
        assert r.replicas["b:1"].index.prefix_blocks(prompt_block_keys(turn1 + [50, 51, 52, 53, 54], (), 4)) == 3
        await r.close()
        return picks

    assert asyncio.run(run()) == [("b:1", "least_load", 0), ("b:1", "prefix", 2), ("a:1", "least_load", 0)]


def test_replicas_follow_dns_as_pods_come_and_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod that left is closed and its series dropped; an empty answer (a resolver hiccup) keeps what was there."""
    from prometheus_client import generate_latest

    answers = [[Endpoint("10.0.0.1:5", "t"), Endpoint("10.0.0.2:5", "t")], [Endpoint("10.0.0.1:5", "t")], []]
    dialled: list[Endpoint] = []

    async def fake_resolve(targets: tuple[str, ...]) -> list[Endpoint]:
        return answers.pop(0)

    def dial(ep: Endpoint) -> grpc.aio.Channel:
        dialled.append(ep)
        return grpc.aio.insecure_channel(ep.target)

    monkeypatch.setattr("gateway.routing.router.resolve", fake_resolve)

    async def run() -> list[list[str]]:
        r = ThinkerRouter(("dns:///t:5",), dial, "prefix_aware", 8, metrics, 0.1, resolve_s=10.0)
        seen = []
        for _ in range(3):
            await r._sync()
            seen.append(sorted(r.replicas))
        await r.close()
        return seen

    metrics = Metrics("gateway", "g0")
    assert asyncio.run(run()) == [["10.0.0.1:5", "10.0.0.2:5"], ["10.0.0.1:5"], ["10.0.0.1:5"]]
    assert {ep.authority for ep in dialled} == {"t"}  # TLS checks the Service name, not the pod IP
    text = generate_latest(metrics.registry).decode()
    assert 'thinker_replica="10.0.0.1:5"' in text and 'thinker_replica="10.0.0.2:5"' not in text


def test_a_replica_without_cache_events_is_routed_by_load_alone() -> None:
    """A thinker older than routing answers CacheEvents UNIMPLEMENTED: it still serves, with no cached prefix."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    async def run() -> tuple[bool, int, str]:
        server = grpc.aio.server()
        servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        r = router((f"127.0.0.1:{port}",), wait_s=5.0)
        await r.start()
        replica, choice = await r.route(list(range(40)), (), reuses_cache=True)
        await asyncio.sleep(0.3)  # its CacheEvents call has been refused by now
        follower = next(t for t in replica._tasks if t.get_name().startswith("cache-"))
        known = (await r.any_replica()).name
        await r.close()
        await server.stop(0)
        return follower.done() and not follower.cancelled(), choice.prefix_blocks, known

    stopped_following, prefix_blocks, known = asyncio.run(run())
    assert stopped_following and prefix_blocks == 0 and known.startswith("127.0.0.1:")


def test_info_goes_to_a_known_replica_even_before_it_serves() -> None:
    async def run() -> str:
        r = router(("127.0.0.1:1",))
        await r.start()
        name = (await r.any_replica()).name
        await r.close()
        return name

    assert asyncio.run(run()) == "127.0.0.1:1"
