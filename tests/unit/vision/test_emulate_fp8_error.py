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


def test_block_scales_round_trip_each_tile_on_its_own() -> None:
    """A 1 x 128 piece holding a large value does not coarsen the next piece's rounding (a whole-row scale would)."""
    import torch

    from bench.vision.emulate_fp8_error import round_trip

    x = torch.full((2, 256), 0.01)
    x[:, 0] = 1000.0
    assert torch.equal(round_trip(x, 1, 128)[:, 128:], round_trip(x[:, 128:]))  # its own scale: as a row alone
    assert not torch.equal(round_trip(x)[:, 128:], round_trip(x[:, 128:]))
    assert round_trip(torch.randn(200, 300), 128, 128).shape == (200, 300)  # edge tiles padded and cut back
