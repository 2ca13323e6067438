"""The vision benchmark times every requested attention backend, the attention call alone, the rotary and fc1."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCH = Path(__file__).resolve().parents[3] / "bench" / "vision" / "bench_vision_tower.py"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_vision_tower", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_named_backends_are_each_timed(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    bench.main(["--tiny", "--skip-hf", "--attention", "segments,auto", "--out", str(out), "--warmup", "0",
                "--iters", "1"])
    result = json.loads(out.read_text())
    assert result["attention_choices"] == ["segments", "auto"] and result["attention_backend"] == "segments"
    for name, row in result["workloads"].items():
        assert set(row["by_attention"]) == {"segments", "auto"}
        assert row["ours"]["median_ms"] == row["by_attention"]["segments"]["median_ms"]
        assert all(t["median_ms"] > 0 for t in result["attention_only"][name].values())
    assert result["rotary"]["fused"]["median_ms"] > 0 and result["mlp_fc1"]["epilogue"]["median_ms"] > 0


def test_all_means_the_backends_this_device_takes(bench: ModuleType) -> None:
    assert bench.attention_choices("all", torch.device("cpu"), torch.float32) == ["auto", "segments"]
    with pytest.raises(ValueError, match="needs CUDA"):
        bench.attention_choices("segments,segments-cudnn", torch.device("cpu"), torch.float32)


def test_a_backend_that_refuses_is_recorded_not_fatal(bench: ModuleType) -> None:
    def refuse() -> None:
        raise RuntimeError("No available kernel. Aborting execution.\nmore detail")

    row = bench.timed_or_error(refuse, torch.device("cpu"), warmup=0, iters=1)
    assert row == {"error": "No available kernel. Aborting execution."}
