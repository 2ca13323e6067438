"""The sampler benchmark runs every kind of row at every batch size (a smoke test; numbers come from the GPU)."""
from __future__ import annotations

from pathlib import Path

from bench.thinker.bench_sampler import KINDS, main


def test_every_kind_and_batch_is_timed(tmp_path: Path) -> None:
    result = main(["--out", str(tmp_path / "s.json"), "--rows", "1", "4", "--vocab", "4096", "--repeat", "3"])
    assert [(r["rows"], r["kind"]) for r in result["records"]] == [(n, k) for n in (1, 4) for k in KINDS]
    assert all(0 < r["ms_min"] <= r["ms_median"] for r in result["records"])
