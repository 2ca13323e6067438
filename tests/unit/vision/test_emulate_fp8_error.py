"""The FP8 error emulation runs on a demo-sized tower: every set of FP8 linears moves the outputs, and all four
together move them more than any one alone (e4m3's rounding errors add up through the blocks)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.vision.emulate_fp8_error import main

pytest.importorskip("transformers")


def test_tiny_run_measures_each_set_of_fp8_linears(tmp_path: Path) -> None:
    out = tmp_path / "emulated.json"
    main(["--tiny", "--out", str(out)])
    result = json.loads(out.read_text())
    errors = {k: v["merged"]["rel_err"] for k, v in result["by_fp8_linears"].items()}
    assert set(errors) == {"qkv", "proj", "fc1", "fc2", "qkv+proj+fc1+fc2"}
    assert all(e > 0 for e in errors.values())
    assert errors["qkv+proj+fc1+fc2"] > max(errors[k] for k in ("qkv", "proj", "fc1", "fc2"))
