"""The vision tower benchmark runs end to end on CPU with --tiny and writes its JSON result."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "vision" / "bench_vision_tower.py"


def test_tiny_run_writes_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_vision_tower", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    out = tmp_path / "result.json"
    bench.main(["--tiny", "--out", str(out), "--warmup", "0", "--iters", "1"])
    result = json.loads(out.read_text())
    expected = {"commit", "date", "device", "command", "workloads", "add_layernorm", "patch_embed", "preprocess"}
    assert expected <= set(result)
    for row in result["workloads"].values():
        assert row["ours"]["median_ms"] > 0 and "transformers_over_ours" in row
    assert result["patch_embed"]["conv3d_over_gemm"] > 0
    assert result["add_layernorm"]["fused_per_forward"] == 2 * 2 + 1  # the tiny tower's two blocks
