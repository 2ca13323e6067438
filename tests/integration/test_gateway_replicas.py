"""`omnimesh up` with gateway.replicas: 2 starts two gateway processes on one port; the connections clients open are
served by both (the HTTP front's too: it opens several), each is probed on a health port of its own, and one that
dies is started again on the shared port while the other keeps answering. Real processes on loopback; the HTTP
front's client is the `openai` package."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

from concurrent.futures import ThreadPoolExecutor

import grpc
import openai
import pytest
import yaml

from omnimesh.v1 import common_pb2, omni_pb2_grpc
from tests.integration.client import chat_request, collect
from tests.integration.conftest import TEST_MESH
from tests.integration.mesh_process import OMNIMESH, Proc, metric_value, scrape, start

GATEWAYS = ("gateway-0", "gateway-1")
CONNECTIONS = 24  # the kernel hashes each to one gateway: all 24 on one has odds of 2 in 2^24


@pytest.fixture(scope="module")
def mesh(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    from gateway.cli.up import MESH_PREFIX

    config = tmp_path_factory.mktemp("gateway-replicas") / "mesh.yaml"
    config.write_text(yaml.safe_dump({**TEST_MESH, "gateway": {**TEST_MESH["gateway"], "replicas": 2}}))
    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--http-port", "0", "--config",
                  str(config)], MESH_PREFIX, timeout=180)
    yield proc
    assert proc.stop() == 0


def answered(mesh: Proc, gateway: str) -> float:
    """Chats this gateway answered; 0 before its first (the series appears with it)."""
    try:
        return metric_value(scrape(mesh.ports[gateway]["metrics_port"]), "omnimesh_requests_total", outcome="ok")
    except KeyError:
        return 0.0


async def one_chat_per_connection(addr: str, connections: int) -> list[int]:
    """A two-token chat on each of `connections` channels, each its own connection (a subchannel pool apiece).
    wait_for_ready, as a client that retries its connection would: one made in the moment a replica dies may be
    reset by the kernel (seen within ~0.1 s of the exit), and the next attempt reaches a live one."""
    async def chat() -> int:
        async with grpc.aio.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            tokens, _ = await collect(omni_pb2_grpc.OmniStub(channel), chat_request(
                "hi", common_pb2.SamplingParams(max_tokens=2)), timeout=30, wait_for_ready=True)
            return len(tokens)

    return await asyncio.gather(*(chat() for _ in range(connections)))


def test_both_gateways_share_the_port_and_serve_the_connections(mesh: Proc) -> None:
    ports = [mesh.ports[g] for g in GATEWAYS]
    assert ports[0]["grpc_port"] == ports[1]["grpc_port"]
    assert ports[0]["metrics_port"] != ports[1]["metrics_port"]
    assert ports[0]["pid"] != ports[1]["pid"]
    before = [answered(mesh, g) for g in GATEWAYS]
    tokens = asyncio.run(one_chat_per_connection(f"127.0.0.1:{ports[0]['grpc_port']}", CONNECTIONS))
    assert tokens == [2] * CONNECTIONS
    served = [answered(mesh, g) - b for g, b in zip(GATEWAYS, before)]
    assert sum(served) == CONNECTIONS and min(served) > 0, served


def wait_until_dead(pid: int, within_s: float = 10.0) -> None:
    """Until the process has exited (gone, or a zombie its supervisor has not reaped yet): its sockets are closed."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still running {within_s} s after SIGKILL")


def test_the_http_front_spreads_its_calls_over_both_gateways(mesh: Proc) -> None:
    api = openai.OpenAI(api_key="none", base_url=f"http://127.0.0.1:{mesh.ports['http']['http_port']}/v1",
                        max_retries=0, timeout=60)
    before = [answered(mesh, g) for g in GATEWAYS]

    def ask(i: int) -> int:
        out = api.chat.completions.create(model="any", messages=[{"role": "user", "content": f"hi {i}"}],
                                          max_tokens=2, temperature=0.0, extra_body={"ignore_eos": True})
        return out.usage.completion_tokens

    with ThreadPoolExecutor(8) as pool:  # 16 calls: the front's 16 connections each take one in turn
        assert list(pool.map(ask, range(16))) == [2] * 16
    served = [answered(mesh, g) - b for g, b in zip(GATEWAYS, before)]
    assert sum(served) == 16 and min(served) > 0, served


def test_omnimesh_bench_spreads_its_connections_over_both_gateways(mesh: Proc, tmp_path: Path) -> None:
    before = [answered(mesh, g) for g in GATEWAYS]
    run = subprocess.run([OMNIMESH, "bench", "--addr", f"127.0.0.1:{mesh.ports['gateway-0']['grpc_port']}",
                          "--workloads", "text", "--concurrency", "4", "--output-tokens", "2", "--measured-per-stream",
                          "4", "--min-measured", "16", "--connections", "16", "--out", str(tmp_path / "b.json")],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    served = [answered(mesh, g) - b for g, b in zip(GATEWAYS, before)]
    assert min(served) > 0, served


def test_a_killed_gateway_is_started_again_on_the_shared_port(mesh: Proc) -> None:
    addr = f"127.0.0.1:{mesh.ports['gateway-0']['grpc_port']}"
    pid = mesh.ports["gateway-1"]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until_dead(pid)
    # while it is down its socket has left the port's group: new connections all reach gateway-0
    assert asyncio.run(one_chat_per_connection(addr, 4)) == [2] * 4
    deadline = time.monotonic() + 90
    while True:  # back on its pinned metrics port once the supervisor's backoff has passed and it has loaded
        try:
            before = answered(mesh, "gateway-1")
            break
        except OSError:
            assert time.monotonic() < deadline, "gateway-1 was not started again"
            time.sleep(0.5)
    assert asyncio.run(one_chat_per_connection(addr, CONNECTIONS)) == [2] * CONNECTIONS
    assert answered(mesh, "gateway-1") > before
    assert mesh.proc.poll() is None
