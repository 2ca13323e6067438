"""bench/soak/soak_mesh.py on the demo model, two small waves: it runs the whole mix through a real mesh, over gRPC
and through the HTTP front, every request ends as the mix intends (served, cancelled by the client, or past its
deadline), no stream stays open at the gateway after a wave, and it writes its result."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_soak_runs_the_whole_mix(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "soak" / "soak_mesh.py"), "--waves", "2", "--per-wave",
                          "16", "--out", str(out)], capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["unexpected_codes"] == {} and result["mesh_exit_code"] == 0
    codes = [w["codes"] for w in result["waves"]]
    assert all(c.get("OK", 0) > 0 and c.get("CANCELLED", 0) > 0 and c.get("DEADLINE_EXCEEDED", 0) > 0 for c in codes)
    assert all(c.get("http_OK", 0) > 0 and c.get("http_CANCELLED", 0) > 0 for c in codes)
    assert result["streams_left_open"] == 0
    assert set(result["growth"]) == {"gateway", "thinker", "vision", "audio", "talker", "http"}
    assert all(set(g) == {"rss_mib", "fds", "threads"} for g in result["growth"].values())


def test_the_hostile_stall_bench_runs_its_corpus(tmp_path: Path) -> None:
    """bench/soak/hostile_stall.py, scaled down (its texts and images then fit and are served): bytes that are no
    request are refused, nothing ends otherwise, both phases are measured, the gateway's RSS is read."""
    out = tmp_path / "stall.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "soak" / "hostile_stall.py"), "--scale", "0.02",
                          "--rounds", "1", "--baseline-s", "0.5", "--out", str(out)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    codes = result["phases"]["hostile"]["codes"]
    assert codes["undecodable_bytes"] == ["INVALID_ARGUMENT"]
    assert set(codes) == {"oversized_text", "text_at_the_cap", "twelve_large_pngs", "undecodable_bytes"}
    assert {c for cs in codes.values() for c in cs} <= {"OK", "INVALID_ARGUMENT"}
    for phase in result["phases"].values():
        assert phase["probes"] > 0 and phase["health_ms_max"] > 0 and phase["stream_gap_ms_max"] > 0
    assert result["gateway_rss"]["start_mib"] > 0 and result["gateway_rss"]["after_mib"] > 0
