"""`omnimesh up --host H` with H not this supervisor's own loopback address: it waits on the gateway's health where
the gateway listens (it dialled 127.0.0.1 and never saw it come up), and the mesh answers there. 127.0.0.2 is on the
loopback interface too, so the test stays on loopback."""
from __future__ import annotations

import subprocess
from pathlib import Path

from gateway.cli.supervisor import dial_host, target
from tests.integration.mesh_process import OMNIMESH, start


def test_the_gateway_is_awaited_and_served_on_its_own_host(demo_ckpt: Path, mesh_config: Path) -> None:
    from gateway.cli.up import MESH_PREFIX

    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--host", "127.0.0.2", "--port", "0", "--config",
                  str(mesh_config)], MESH_PREFIX, timeout=180)
    try:
        addr = f"127.0.0.2:{proc.ports['gateway']['grpc_port']}"
        out = subprocess.run([OMNIMESH, "chat", "--addr", addr, "--max-tokens", "3", "hi"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
    finally:
        assert proc.stop() == 0


def test_wildcards_are_dialled_on_loopback() -> None:
    assert [dial_host(h) for h in ("0.0.0.0", "::", "[::]", "", "127.0.0.2", "gw.local")] == [
        "127.0.0.1", "::1", "::1", "127.0.0.1", "127.0.0.2", "gw.local"]
    assert [target(h, 5) for h in ("127.0.0.1", "::1", "[::1]")] == ["127.0.0.1:5", "[::1]:5", "[::1]:5"]
