"""Two thinker replicas behind `omnimesh up` (thinker.replicas: 2): prefix-aware routing keeps multi-turn
conversations where their prefix is cached (hit rate as one replica's), round robin loses the history of every other
turn; a burst on one prefix spreads past the margin; a replica killed mid-run fails only its own streams; a draining
replica is not held by the routers; a late gateway routes by the replicas' snapshots. Hit counts are read from the
replicas' own metrics."""
from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc
import pytest
import yaml

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc, thinker_pb2, thinker_pb2_grpc
from runtime.server import READY_PREFIX
from tests.integration.client import collect
from tests.integration.conftest import TEST_MESH
from tests.integration.mesh_process import OMNIMESH, Proc, metric_value, scrape, start

REPLICAS = ("thinker-0", "thinker-1")
MARGIN = 2  # of the extra gateways (the burst); the mesh's own keeps the default
GREEDY = dict(temperature=0.0, max_tokens=4)
WORDS = ("router cache block replica prefix token stream engine gateway queue batch model answer "
                "question kernel memory").split()


def mesh_yaml(path: Path, **gateway: object) -> Path:
    thinker = dict(TEST_MESH["thinker"], engine=dict(TEST_MESH["thinker"]["engine"], kv_cache_bytes=64 << 20))
    path.write_text(yaml.safe_dump({**TEST_MESH, "thinker": thinker,
                                    "gateway": {**TEST_MESH["gateway"], **gateway}}))
    return path


@pytest.fixture(scope="module")
def mesh2(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    config = mesh_yaml(tmp_path_factory.mktemp("routing") / "mesh.yaml")  # the default margin
    data = yaml.safe_load(config.read_text())
    data["thinker"]["replicas"] = 2
    config.write_text(yaml.safe_dump(data))
    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(config)], MESH_PREFIX,
                 timeout=240)
    yield proc
    proc.stop()


def extra_gateway(demo_ckpt: Path, workdir: Path, name: str, addresses: list[str], policy: str,
                  margin: int = MARGIN) -> Proc:
    """Another gateway on the same replicas (more gateways share them, each following their events)."""
    config = mesh_yaml(workdir / f"{name}.yaml", thinker_routing=policy, thinker_routing_margin=margin)
    data = yaml.safe_load(config.read_text())
    data["thinker"]["addresses"] = addresses
    config.write_text(yaml.safe_dump(data))
    return start([sys.executable, "-m", "gateway", "--model", str(demo_ckpt), "--config", str(config), "--port", "0",
                  "--metrics-port", "0", "--replica", name], READY_PREFIX, timeout=120)


def thinker_addr(mesh: Proc, replica: str) -> str:
    return f"127.0.0.1:{mesh.ports[replica]['grpc_port']}"


def hit_counts(mesh: Proc, replicas: tuple[str, ...] = REPLICAS) -> tuple[float, float]:
    """(prompt tokens found cached, prompt tokens looked up), summed over `replicas`."""
    texts = [scrape(mesh.ports[r]["metrics_port"]) for r in replicas]
    return (sum(metric_value(t, "omnimesh_prefix_cache_hits_total") for t in texts),
            sum(metric_value(t, "omnimesh_prefix_cache_queries_total") for t in texts))


def message(role: str, text: str) -> omni_pb2.Message:
    return omni_pb2.Message(role=role, content=[omni_pb2.ContentPart(text=text)])


async def conversation(stub: omni_pb2_grpc.OmniStub, system: str, conv: int, turns: int) -> None:
    """One conversation, turn after turn, each turn's prompt the whole history so far."""
    history = [message("system", system)]
    for turn in range(turns):
        history.append(message("user", f"conversation {conv} turn {turn}: " + words(conv * 31 + turn, 60)))
        request = omni_pb2.ChatRequest(messages=history, sampling=common_pb2.SamplingParams(**GREEDY))
        answer = "".join([ev.text.text async for ev in stub.Chat(request) if ev.HasField("text")])
        history.append(message("assistant", answer))


async def workload(addr: str, system: str, conversations: int = 8, turns: int = 4) -> None:
    """The conversations one after another: round robin then sends turn t of every conversation to replica t % 2
    (turns is even), so what it keeps does not depend on how concurrent conversations interleave on its counter."""
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = omni_pb2_grpc.OmniStub(channel)
        for c in range(conversations):
            await conversation(stub, system, c, turns)


def hit_rate(mesh: Proc, addr: str, system: str, replicas: tuple[str, ...] = REPLICAS) -> float:
    hits0, queries0 = hit_counts(mesh, replicas)
    asyncio.run(workload(addr, system))
    hits1, queries1 = hit_counts(mesh, replicas)
    return (hits1 - hits0) / (queries1 - queries0)


def words(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 5 + i * i) % len(WORDS)] for i in range(n))


def system_prompt(seed: int) -> str:
    """A shared system prompt, different per run so runs never hit each other's blocks; short beside the
    conversations, whose history is what routing keeps or loses."""
    return f"Run {seed}. " + words(seed, 24)


def test_prefix_aware_matches_one_replica_and_round_robin_loses_the_history(mesh2: Proc, demo_ckpt: Path,
                                                                             tmp_path: Path) -> None:
    addresses = [thinker_addr(mesh2, r) for r in REPLICAS]
    one = extra_gateway(demo_ckpt, tmp_path, "gw-one", addresses[:1], "prefix_aware")
    rr = extra_gateway(demo_ckpt, tmp_path, "gw-rr", addresses, "round_robin")
    try:
        single = hit_rate(mesh2, f"127.0.0.1:{one.ports['grpc_port']}", system_prompt(1), REPLICAS[:1])
        aware = hit_rate(mesh2, f"127.0.0.1:{mesh2.ports['gateway']['grpc_port']}", system_prompt(2))
        robin = hit_rate(mesh2, f"127.0.0.1:{rr.ports['grpc_port']}", system_prompt(3))
    finally:
        one.stop()
        rr.stop()
    routed = [line for line in scrape(mesh2.ports["gateway"]["metrics_port"]).splitlines()
              if line.startswith("omnimesh_thinker_routed_total")]
    assert aware >= single - 0.05, (single, aware, robin, routed)
    # round robin still finds the system prompt on both replicas, and from turn 2 on the history of two turns back;
    # it loses the last turn's prompt and answer every time (~0.6x prefix_aware's rate with these prompts)
    assert robin < 0.75 * aware, (single, aware, robin)


def test_a_burst_on_one_prefix_spreads_past_the_margin(mesh2: Proc, demo_ckpt: Path, tmp_path: Path) -> None:
    addresses = [thinker_addr(mesh2, r) for r in REPLICAS]
    gateway = extra_gateway(demo_ckpt, tmp_path, "gw-burst", addresses, "prefix_aware")
    try:
        before, after = burst(gateway.ports, system_prompt(4))
    finally:
        gateway.stop()

    routed = {}
    for r in REPLICAS:
        name = thinker_addr(mesh2, r)
        routed[r] = (metric_value(after, "omnimesh_thinker_routed_total", thinker_replica=name)
                     - _or_zero(before, "omnimesh_thinker_routed_total", thinker_replica=name))
    assert sum(routed.values()) == 12
    # the first request caches the prefix on one replica; it keeps the burst until it holds MARGIN more than the
    # other, which then takes the prefix too and the rest split by load
    assert max(routed.values()) <= (12 + MARGIN) // 2, routed
    assert metric_value(after, "omnimesh_thinker_routed_total", decision="load_guard") > 0


def burst(gw: dict, system: str) -> tuple[str, str]:
    """12 requests at once on one system prompt; the gateway's metrics before and after."""
    async def send() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gw['grpc_port']}") as channel:
            stub = omni_pb2_grpc.OmniStub(channel)
            requests = [omni_pb2.ChatRequest(messages=[message("system", system), message("user", f"q{i}")],
                                             sampling=common_pb2.SamplingParams(temperature=0.0, max_tokens=32))
                        for i in range(12)]
            await asyncio.gather(*(collect(stub, r) for r in requests))

    before = scrape(gw["metrics_port"])
    asyncio.run(send())
    return before, scrape(gw["metrics_port"])


def _or_zero(text: str, name: str, **labels: str) -> float:
    try:
        return metric_value(text, name, **labels)
    except KeyError:
        return 0.0


def test_cache_events_reports_a_snapshot_then_changes_and_refuses_a_bad_interval(mesh2: Proc) -> None:
    async def read() -> tuple[list[thinker_pb2.CacheEvent], grpc.aio.AioRpcError]:
        async with grpc.aio.insecure_channel(thinker_addr(mesh2, "thinker-0")) as channel:
            stub = thinker_pb2_grpc.ThinkerStub(channel)
            call = stub.CacheEvents(thinker_pb2.CacheEventsRequest(interval_ms=20))
            events = [await call.read() for _ in range(3)]
            call.cancel()
            try:
                await stub.CacheEvents(thinker_pb2.CacheEventsRequest(interval_ms=5)).read()
            except grpc.aio.AioRpcError as err:
                return events, err
            raise AssertionError("interval_ms=5 was accepted")

    events, err = asyncio.run(read())
    assert events[0].snapshot and events[0].block_size == 16 and events[0].prefix_cache
    assert not events[0].needs_state and not events[0].states_stored  # an attention model reuses any cached prefix
    assert all(len(k) == 16 for k in events[0].stored)
    assert not events[1].snapshot and 0.0 <= events[1].load.kv_usage <= 1.0
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "interval_ms" in err.details()


def test_the_mesh_info_lists_each_thinker_replica(mesh2: Proc) -> None:
    import grpc

    from omnimesh.v1 import common_pb2, omni_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{mesh2.ports['gateway']['grpc_port']}") as channel:
        info = omni_pb2_grpc.OmniStub(channel).Info(common_pb2.InfoRequest(), timeout=30)
    thinkers = [s for s in info.stages if s.stage == "thinker"]
    assert len(thinkers) == 2 and len({s.replica for s in thinkers}) == 2, thinkers


def test_killing_a_replica_mid_run_fails_only_its_streams(mesh2: Proc) -> None:
    gw = mesh2.ports["gateway"]
    victim = mesh2.ports["thinker-1"]["pid"]
    outcomes: list[str] = []

    async def stream(stub: omni_pb2_grpc.OmniStub, i: int, started: asyncio.Event) -> None:
        request = omni_pb2.ChatRequest(messages=[message("user", f"long answer {i}")],
                                       sampling=common_pb2.SamplingParams(temperature=0.0, max_tokens=400))
        try:
            async for ev in stub.Chat(request):
                if ev.HasField("text"):
                    started.set()
                if ev.HasField("error"):
                    outcomes.append(ev.error.code)
                    return
            outcomes.append("OK")
        except grpc.aio.AioRpcError as err:
            outcomes.append(err.code().name)

    async def run() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gw['grpc_port']}") as channel:
            stub = omni_pb2_grpc.OmniStub(channel)
            started = [asyncio.Event() for _ in range(8)]
            tasks = [asyncio.create_task(stream(stub, i, started[i])) for i in range(8)]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
            os.kill(victim, signal.SIGKILL)
            await asyncio.gather(*tasks)
            # the survivor takes every new request while the victim is down (the supervisor restarts it later)
            after = [ev async for ev in stub.Chat(omni_pb2.ChatRequest(
                messages=[message("user", "after")], sampling=common_pb2.SamplingParams(**GREEDY)))]
            assert any(ev.HasField("done") for ev in after)

    asyncio.run(run())
    assert set(outcomes) == {"OK", "UNAVAILABLE"}, outcomes  # both replicas had streams; only the victim's failed


def test_a_draining_replica_is_not_held_by_the_routers_streams(demo_ckpt: Path, tmp_path: Path) -> None:
    """A gateway follows each replica's health and cache events on calls that never end by themselves; a replica
    told to stop must not wait its whole grace period (30 s here) for them, and is out of routing at once."""
    from gateway.routing.router import ThinkerRouter
    from runtime.metrics import Metrics
    from tests.integration.mesh_process import start_stage

    thinker = start_stage("thinker", demo_ckpt, {"thinker": TEST_MESH["thinker"]}, tmp_path)
    addr = f"127.0.0.1:{thinker.ports['grpc_port']}"

    async def run() -> tuple[float, bool]:
        router = ThinkerRouter((addr,), lambda ep: grpc.aio.insecure_channel(ep.target), "prefix_aware", 8,
                               Metrics("gateway", "g"), wait_s=10.0, resolve_s=10.0)
        await router.start()
        replica = (await router.serving())[0]
        while not replica.index.block_size:  # its CacheEvents stream is open
            await asyncio.sleep(0.05)
        t0 = asyncio.get_running_loop().time()
        thinker.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(thinker.proc.wait, 60)
        took = asyncio.get_running_loop().time() - t0
        serving = replica.serving
        await router.close()
        return took, serving

    took, serving = asyncio.run(run())
    assert took < 5.0 and not serving


def test_a_late_gateway_routes_by_what_another_gateway_left_cached(mesh2: Proc, demo_ckpt: Path,
                                                                   tmp_path: Path) -> None:
    """The second gateway never saw the first turn: it learns where its blocks are from the replicas' snapshots,
    and sends the next turn there."""
    gw = mesh2.ports["gateway"]
    history = [message("system", system_prompt(5)), message("user", words(5, 60))]
    routed_before = scrape(gw["metrics_port"])

    async def turn(addr: str) -> str:
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = omni_pb2_grpc.OmniStub(channel)
            request = omni_pb2.ChatRequest(messages=history, sampling=common_pb2.SamplingParams(**GREEDY))
            return "".join([ev.text.text async for ev in stub.Chat(request) if ev.HasField("text")])

    history.append(message("assistant", asyncio.run(turn(f"127.0.0.1:{gw['grpc_port']}"))))
    routed_after = scrape(gw["metrics_port"])
    (first,) = [thinker_addr(mesh2, r) for r in REPLICAS
                if _or_zero(routed_after, "omnimesh_thinker_routed_total", thinker_replica=thinker_addr(mesh2, r))
                > _or_zero(routed_before, "omnimesh_thinker_routed_total", thinker_replica=thinker_addr(mesh2, r))]
    late = extra_gateway(demo_ckpt, tmp_path, "gw-late", [thinker_addr(mesh2, r) for r in REPLICAS],
                         "prefix_aware")
    try:
        history.append(message("user", words(6, 20)))
        asyncio.run(turn(f"127.0.0.1:{late.ports['grpc_port']}"))
        text = scrape(late.ports["metrics_port"])
    finally:
        late.stop()
    assert metric_value(text, "omnimesh_thinker_routed_total", thinker_replica=first, decision="prefix") == 1
    assert metric_value(text, "omnimesh_thinker_routed_prefix_tokens_total", thinker_replica=first) >= 64
