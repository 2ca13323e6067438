"""The late-launch arrival model (bench/thinker/late_launch_model.py) runs each arrival kind both ways on the served
engine and loop, and writes what it printed."""
from __future__ import annotations

import json
from pathlib import Path

from bench.thinker.late_launch_model import main
from runtime.engine import engine as engine_module


def test_each_arrival_kind_runs_both_ways_and_leaves_the_sampler_as_it_was(tmp_path: Path) -> None:
    sample = engine_module.launch_sample
    out = tmp_path / "model.json"
    main(["--out", str(out), "--step-ms", "5", "--concurrency", "2", "--output-tokens", "3", "--requests", "6",
          "--think-ms", "10"])
    result = json.loads(out.read_text())
    assert {"commit", "date", "device", "command"} <= set(result)
    runs = result["runs"]
    assert [(r["arrivals"], r["late_launch"]) for r in runs] == [
        (kind, late) for kind in ("closed", "think", "open") for late in (False, True)]
    assert all(r["requests"] >= 4 and r["ttft_ms_p50"] > 0 for r in runs)
    assert engine_module.launch_sample is sample
