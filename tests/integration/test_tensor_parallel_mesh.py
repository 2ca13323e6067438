"""A mesh whose thinker is split over two ranks on CPU (thinker.tensor_parallel: 2, gloo): greedy tokens through
`omnimesh up` equal the single-rank mesh's, for requests that batch together."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from gateway.cli.up import MESH_PREFIX
from tests.integration.conftest import TEST_MESH
from tests.integration.mesh_process import OMNIMESH, Proc, start
from tests.integration.test_mesh_chat import chat_json

PROMPTS = ["Hello", "What is the capital of France?", "Write a haiku about 42 cats."]
MAX_NEW = 16


@pytest.fixture(scope="module")
def tp2_mesh(demo_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Proc:
    path = tmp_path_factory.mktemp("tp2") / "mesh.yaml"
    path.write_text(yaml.safe_dump({**TEST_MESH, "thinker": {**TEST_MESH["thinker"], "tensor_parallel": 2,
                                                             "cpu_threads": 1}}))
    proc: Proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(path)],
                       MESH_PREFIX, timeout=180)
    yield proc
    assert proc.stop() == 0


def _greedy(addr: str) -> list[list[int]]:
    """Every prompt at once (one engine batch), greedy."""
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        runs = list(pool.map(lambda text: chat_json(addr, text, "--greedy", "--max-tokens", str(MAX_NEW)), PROMPTS))
    for code, events in runs:
        assert code == 0, events
    return [[t for e in events if e["type"] == "text" for t in e["token_ids"]] for _, events in runs]


def test_tp2_mesh_greedy_tokens_equal_the_single_rank_mesh(tp2_mesh: Proc, gateway_addr: str) -> None:
    thinker = tp2_mesh.ports["thinker"]["pid"]
    assert len(_spawned(thinker)) == 1  # rank 1, spawned by the thinker (rank 0)
    ours = _greedy(f"127.0.0.1:{tp2_mesh.ports['gateway']['grpc_port']}")
    assert all(ours) and ours == _greedy(gateway_addr)


def _spawned(pid: int) -> list[int]:
    """Children of `pid` started by multiprocessing's spawn (not its resource tracker)."""
    children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
