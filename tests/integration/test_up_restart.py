"""`omnimesh up` starts a stage that died again on its port, with backoff, and the mesh answers again; with
--exit-on-failure it stops instead. Real processes on loopback."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import grpc
import yaml

from omnimesh.v1 import common_pb2, omni_pb2_grpc
from tests.integration.client import chat_request, collect
from tests.integration.conftest import TEST_MESH
from tests.integration.mesh_process import OMNIMESH, start


def up(demo_ckpt: Path, tmp_path: Path, *flags: str):
    from gateway.cli.up import MESH_PREFIX

    config = tmp_path / "mesh.yaml"
    config.write_text(yaml.safe_dump(TEST_MESH))
    return start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(config), *flags],
                 MESH_PREFIX, timeout=180)


async def tokens_when_served(addr: str, within_s: float) -> int:
    deadline = time.monotonic() + within_s
    while True:
        try:
            async with grpc.aio.insecure_channel(addr) as channel:
                tokens, _ = await collect(omni_pb2_grpc.OmniStub(channel), chat_request(
                    "hi", common_pb2.SamplingParams(max_tokens=2)), timeout=10)
                return len(tokens)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def test_a_killed_thinker_is_started_again_and_the_mesh_answers(demo_ckpt: Path, tmp_path: Path) -> None:
    mesh = up(demo_ckpt, tmp_path)
    try:
        addr = f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}"
        assert asyncio.run(tokens_when_served(addr, 10)) == 2
        os.kill(mesh.ports["thinker"]["pid"], signal.SIGKILL)
        assert asyncio.run(tokens_when_served(addr, 90)) == 2
        assert mesh.proc.poll() is None
    finally:
        assert mesh.stop() == 0


def test_exit_on_failure_stops_the_mesh(demo_ckpt: Path, tmp_path: Path) -> None:
    mesh = up(demo_ckpt, tmp_path, "--exit-on-failure")
    try:
        os.kill(mesh.ports["thinker"]["pid"], signal.SIGKILL)
        assert mesh.proc.wait(timeout=60) == 1
    finally:
        mesh.stop()
