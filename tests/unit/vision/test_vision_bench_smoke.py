"""The vision tower benchmark runs end to end on CPU with --tiny and writes its JSON result; its FP8 parts on CPU."""
from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

from services.vision.model import VisionOutput, VisionTower

def test_tiny_run_writes_result(tmp_path: Path, bench: ModuleType) -> None:
    out = tmp_path / "result.json"
    bench.main(["--tiny", "--out", str(out), "--warmup", "0", "--iters", "1"])
    result = json.loads(out.read_text())
    expected = {"commit", "date", "device", "command", "workloads", "add_layernorm", "patch_embed", "preprocess"}
    assert expected <= set(result)
    for row in result["workloads"].values():
        assert row["ours"]["median_ms"] > 0 and "transformers_over_ours" in row
    assert result["patch_embed"]["conv3d_over_gemm"] > 0
    assert result["add_layernorm"]["fused_per_forward"] == 2 * 2 + 1  # the tiny tower's two blocks
    assert result["add_layernorm"]["fused_fp8"]["median_ms"] > 0
    assert result["linear_dtype"] == "native" and "FP8 tensor cores" in result["block_linears"]["skipped"]
    assert result["norms_writing_fp8"] == 0


def test_fp8_linears_on_cpu_fail_before_building_anything(tmp_path: Path, bench: ModuleType) -> None:
    with pytest.raises(ValueError, match="linear_dtype='fp8' needs a CUDA GPU with FP8 tensor cores"):
        bench.main(["--tiny", "--linear", "fp8", "--out", str(tmp_path / "result.json")])
    assert not (tmp_path / "result.json").exists()


def test_fp8_run_records_accuracy_against_native_linears(tmp_path: Path, bench: ModuleType,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The --linear fp8 run on CPU with the device check lifted: PyTorch's CPU torch._scaled_mm runs the FP8 GEMMs."""
    import services.vision.model.tower as tower_module

    monkeypatch.setattr(tower_module, "check_linear_dtype", lambda *args: None)
    monkeypatch.setattr(bench, "check_linear_dtype", lambda *args: None)
    out = tmp_path / "result.json"
    bench.main(["--tiny", "--linear", "fp8", "--skip-hf", "--attention", "segments", "--out", str(out),
                "--warmup", "0", "--iters", "1"])
    result = json.loads(out.read_text())
    assert result["linear_dtype"] == "fp8"
    assert result["norms_writing_fp8"] == 2 * 2  # the timed tower quantizes in norm1 and norm2 of both blocks
    for row in result["workloads"].values():
        assert row["native_linears"]["median_ms"] > 0 and row["native_over_ours"] > 0
        accuracy = row["accuracy_vs_native"]
        assert len(accuracy["deepstack"]) == 2  # the tiny tower's deepstack mergers
        for entry in [accuracy["merged"], *accuracy["deepstack"]]:
            assert 0 < entry["rel_err"] < 0.1 and entry["cosine"] > 0.99
    assert set(result["block_linears"]["layers"]) == {"qkv", "proj", "fc1", "fc2"}


def test_block_linears_times_native_and_fp8_layers(bench: ModuleType) -> None:
    """The GPU-only section's arithmetic, on CPU through PyTorch's CPU torch._scaled_mm."""
    args = bench.parse_args(["--tiny", "--out", "unused.json", "--warmup", "0", "--iters", "1"])
    cpu = torch.device("cpu")
    native = VisionTower.from_state_dict(bench.TINY, bench.random_state(bench.TINY, seed=0), cpu, torch.float32)
    result = bench.bench_block_linears(bench.TINY, native, bench.workloads(True)[-1], cpu, torch.float32, args)
    assert set(result["layers"]) == {"qkv", "proj", "fc1", "fc2"}
    for name, entry in result["layers"].items():
        assert entry["fp8"]["median_ms"] > 0 and entry["fp8_gemm_fast_accum"]["tflop_s"] > 0
        assert entry["rel_err"] < 0.1 and entry["cosine"] > 0.99
        assert ("fp8_prequantized" in entry) == (name in ("qkv", "fc1"))  # the layers whose norm quantizes
    assert result["norms"]["native"]["median_ms"] > 0 and result["norms"]["fp8"]["median_ms"] > 0
    totals = result["per_block"]
    layers, norms = result["layers"], result["norms"]
    fused = (layers["qkv"]["fp8_prequantized"]["median_ms"] + layers["proj"]["fp8"]["median_ms"]
             + layers["fc1"]["fp8_prequantized"]["median_ms"] + layers["fc2"]["fp8"]["median_ms"]
             + 2 * norms["fp8"]["median_ms"])
    assert totals["fp8_ms"] == pytest.approx(fused)
    assert totals["native_over_fp8"] == pytest.approx(totals["native_ms"] / fused)
    assert totals["fused_quantize_saving_per_forward_ms"] == pytest.approx(
        (totals["fp8_separate_quantize_ms"] - fused) * bench.TINY.depth)


def test_compare_outputs_measures_error_and_cosine(bench: ModuleType) -> None:
    want = VisionOutput(torch.ones(4, 3), [torch.ones(4, 3)])
    got = VisionOutput(torch.ones(4, 3) * 1.1, [-torch.ones(4, 3)])
    result = bench.compare_outputs(got, want)
    assert result["merged"]["rel_err"] == pytest.approx(0.1) and result["merged"]["cosine"] == pytest.approx(1.0)
    opposite = result["deepstack"][0]
    assert opposite["rel_err"] == pytest.approx(2.0) and opposite["cosine"] == pytest.approx(-1.0)
