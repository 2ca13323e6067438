"""A Qwen3.5 mesh whose thinker is split over two ranks on CPU (thinker.tensor_parallel: 2, gloo): greedy tokens
through `omnimesh up` equal the single-rank mesh's for requests that batch together (the hybrid LM's state slots
held per rank)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.cli.up import MESH_PREFIX
from tests.integration.conftest import TEST_MESH
from tests.integration.mesh_process import OMNIMESH, Proc, start
from tests.integration.test_tensor_parallel_mesh import _greedy, _spawned


def _mesh(ckpt: Path, folder: Path, thinker: dict) -> Proc:
    path = folder / "mesh.yaml"
    path.write_text(yaml.safe_dump({**TEST_MESH, "thinker": {**TEST_MESH["thinker"], **thinker}}))
    return start([OMNIMESH, "up", "--model", str(ckpt), "--port", "0", "--config", str(path)], MESH_PREFIX,
                 timeout=180)


def _tokens(proc: Proc) -> list[list[int]]:
    try:
        return _greedy(f"127.0.0.1:{proc.ports['gateway']['grpc_port']}")
    finally:
        assert proc.stop() == 0


def test_tp2_qwen3_5_mesh_greedy_tokens_equal_the_single_rank_mesh(qwen3_5_ckpt: Path,
                                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    single = _tokens(_mesh(qwen3_5_ckpt, tmp_path_factory.mktemp("one"), {}))  # one mesh at a time: two cores
    tp2 = _mesh(qwen3_5_ckpt, tmp_path_factory.mktemp("tp2"), {"tensor_parallel": 2, "cpu_threads": 1})
    assert len(_spawned(tp2.ports["thinker"]["pid"])) == 1  # rank 1, spawned by the thinker (rank 0)
    ours = _tokens(tp2)
    assert all(ours) and ours == single
