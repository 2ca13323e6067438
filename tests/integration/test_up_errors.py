"""`omnimesh up` on what a user got wrong: one line naming it and exit code 1, not a traceback of `up` itself. A stage
that fails to start says why in its own log; `up` then names the stage."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.integration.mesh_process import OMNIMESH


def up(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([OMNIMESH, "up", "--port", "0", *args], capture_output=True, text=True, timeout=180)


def last_line(run: subprocess.CompletedProcess) -> str:
    return run.stderr.strip().splitlines()[-1]


def test_a_model_path_without_a_checkpoint(tmp_path: Path) -> None:
    run = up("--model", str(tmp_path / "nowhere"))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert last_line(run).startswith(f"error: model '{tmp_path / 'nowhere'}': no config.json there")


def test_a_config_file_that_is_not_yaml(tmp_path: Path) -> None:
    (tmp_path / "mesh.yaml").write_text("thinker: [\n")
    run = up("--config", str(tmp_path / "mesh.yaml"))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    line = last_line(run)  # PyYAML's words for the problem, then where it is
    assert line.startswith("error: ") and "mesh.yaml is not valid YAML: " in line
    assert line.endswith("at line 2, column 1")


def test_a_checkpoint_a_stage_cannot_load_names_the_stage(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {}}))
    (tmp_path / "mesh.yaml").write_text("vision: {enabled: false}\naudio: {enabled: false}\ntalker: {enabled: false}\n")
    run = up("--model", str(tmp_path), "--config", str(tmp_path / "mesh.yaml"))
    assert run.returncode == 1
    assert "no thinker_config.text_config; is it a Qwen3-Omni checkpoint?" in run.stderr  # the thinker's own log
    assert last_line(run) == "error: thinker did not become ready (exit code 1); its log above says why"


def test_a_config_value_of_the_wrong_type_names_its_key(tmp_path: Path) -> None:
    (tmp_path / "mesh.yaml").write_text("thinker:\n  engine:\n    enable_prefix_cache: 'no'\nvision:\n  engine: {}\n")
    run = up("--config", str(tmp_path / "mesh.yaml"))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    line = last_line(run)  # both mistakes, each by its dotted key, on the one line
    assert line.startswith("error: config field thinker.engine.enable_prefix_cache='no' is invalid: use true or false")
    assert "; unknown config key vision.engine: vision takes only " in line
