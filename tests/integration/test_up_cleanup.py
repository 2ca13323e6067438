"""`omnimesh up` removes the directory it wrote (the resolved mesh config, API keys included) when it stops, whether
after a signal or a failed start."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from tests.integration.conftest import TEST_MESH
from tests.integration.mesh_process import OMNIMESH, start


def written(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("omnimesh-up-*"))


def test_up_removes_its_directory_when_stopped(demo_ckpt: Path, tmp_path: Path, monkeypatch) -> None:
    from gateway.cli.up import MESH_PREFIX

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    config = tmp_path / "mesh.yaml"
    config.write_text(yaml.safe_dump(TEST_MESH))
    monkeypatch.setenv("TMPDIR", str(tmp))
    proc = start([OMNIMESH, "up", "--model", str(demo_ckpt), "--port", "0", "--config", str(config)], MESH_PREFIX,
                 timeout=180)
    try:
        [workdir] = written(tmp)
        assert (workdir / "mesh.yaml").is_file()
    finally:
        assert proc.stop() == 0
    assert written(tmp) == []


def test_up_removes_its_directory_when_a_stage_fails_to_start(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {}}))
    (tmp_path / "mesh.yaml").write_text("vision: {enabled: false}\naudio: {enabled: false}\ntalker: {enabled: false}\n")
    run = subprocess.run([OMNIMESH, "up", "--port", "0", "--model", str(tmp_path), "--config",
                          str(tmp_path / "mesh.yaml")], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "TMPDIR": str(tmp)})
    assert run.returncode == 1 and "thinker did not become ready" in run.stderr
    assert written(tmp) == []
