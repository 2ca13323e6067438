"""bench/soak/soak_mesh.py, two small waves: it runs the whole mix a deployment serves through a real mesh, over gRPC
and through the HTTP front (and, on Qwen3-ASR, as transcriptions), every request ends as the mix intends (served,
cancelled by the client, or past its deadline), no stream stays open at the gateway and no request at the thinker
after a wave, and it writes its result."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def soak(tmp_path: Path, model: str, per_wave: int) -> dict[str, Any]:
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "soak" / "soak_mesh.py"), "--model", model, "--waves",
                          "2", "--per-wave", str(per_wave), "--out", str(out)], capture_output=True, text=True,
                         timeout=400, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["unexpected_codes"] == {} and result["mesh_exit_code"] == 0
    assert set(result["held_after_waves"]) == {"gateway", "thinker"}
    assert all(held == 0 for held in result["held_after_waves"].values())
    assert all(set(g) == {"rss_mib", "fds", "threads"} for g in result["growth"].values())
    first, second = (w["prefix_hit_tokens_so_far"] for w in result["waves"])
    assert 0 < first < second  # the shared system turn hits the prefix cache in every wave
    for codes in (w["codes"] for w in result["waves"]):
        assert all(codes.get(code, 0) > 0 for code in ("OK", "CANCELLED", "DEADLINE_EXCEEDED", "http_OK",
                                                        "http_CANCELLED")), codes
    return result


def test_the_soak_runs_the_whole_omni_mix(tmp_path: Path) -> None:
    result = soak(tmp_path, "demo", 16)
    assert set(result["growth"]) == {"gateway", "thinker", "vision", "audio", "talker", "http"}
    assert result["mix"] == {"kinds": ["text", "image", "audio", "video"], "speech": True, "transcribe": False}


@pytest.mark.parametrize("model,per_wave,stages,kinds", [
    # a third of ASR's requests are chats: 42 a wave hold a late one (i % 21 == 0) that is not also cancelled
    ("demo-asr", 42, {"gateway", "thinker", "audio", "http"}, ["text", "audio"]),
    ("demo-qwen3.5", 21, {"gateway", "thinker", "vision", "http"}, ["text", "image", "video"]),
])
def test_the_soak_shapes_its_mix_to_what_the_deployment_serves(tmp_path: Path, model: str, per_wave: int,
                                                                stages: set[str], kinds: list[str]) -> None:
    """Qwen3-ASR hears audio and transcribes, Qwen3.5 sees images and videos; neither speaks."""
    result = soak(tmp_path, model, per_wave)
    assert set(result["growth"]) == stages
    assert result["mix"] == {"kinds": kinds, "speech": False, "transcribe": model == "demo-asr"}
    if model == "demo-asr":
        for codes in (w["codes"] for w in result["waves"]):
            assert all(codes.get(f"transcribe_{end}", 0) > 0 for end in ("OK", "CANCELLED", "DEADLINE_EXCEEDED"))
            assert all(codes.get(f"http_transcribe_{end}", 0) > 0 for end in ("OK", "CANCELLED"))


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
