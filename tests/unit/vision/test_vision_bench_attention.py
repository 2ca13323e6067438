"""The vision benchmark times every requested attention backend, the attention call alone, the rotary and fc1."""
from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

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
