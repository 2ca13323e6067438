"""Integration fixtures: a real mesh started with `omnimesh up` on the demo checkpoint, on loopback."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.mesh_process import OMNIMESH, Proc, start

# A text-only deployment (what a deployment without encoders or talker serves is tested against it), with a small
# KV cache and fast token flushes: the demo model is tiny, the test machine has 2 cores.
TEST_MESH = {
    "vision": {"enabled": False},
    "audio": {"enabled": False},
    "talker": {"enabled": False},
    "gateway": {"stage_timeout_s": 3.0},
    "thinker": {"engine": {"kv_cache_bytes": 16 << 20, "max_model_len": 1024, "max_num_seqs": 8,
                           "max_batch_tokens": 512, "token_flush_ms": 5.0}},
}


@pytest.fixture(scope="session")
def mesh_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mesh") / "mesh.yaml"
    path.write_text(yaml.safe_dump(TEST_MESH))
    return path


@pytest.fixture(scope="session")
def mesh(demo_ckpt: Path, mesh_config: Path) -> Proc:
    """`omnimesh up` with the gateway on a free port; `mesh.ports[name]` has grpc_port/metrics_port/pid."""
    from gateway.cli.up import MESH_PREFIX

    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(mesh_config)],
                 MESH_PREFIX, timeout=180)
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="session")
def gateway_addr(mesh: Proc) -> str:
    return f"127.0.0.1:{mesh.ports['gateway']['grpc_port']}"


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
