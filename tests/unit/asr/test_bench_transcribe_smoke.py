"""bench/asr/bench_transcribe.py --tiny end to end on the CPU: the demo Qwen3-ASR checkpoint served by `omnimesh up`
(audio + thinker + gateway as real processes), two closed-loop levels of Transcribe RPCs, and the result file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOKENS = 6


def test_tiny_run_writes_every_level_with_the_requested_tokens(tmp_path: Path) -> None:
    out = tmp_path / "asr_tiny.json"
    cmd = [sys.executable, str(REPO / "bench/asr/bench_transcribe.py"), "--tiny", "--out", str(out),
           "--concurrency", "1", "2", "--output-tokens", str(TOKENS), "--min-measured", "3",
           "--measured-per-stream", "1", "--warmup", "1", "--ready-timeout", "120"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=150)
    assert run.returncode == 0, run.stderr[-3000:]
    d = json.loads(out.read_text())
    for key in ("commit", "date", "device", "versions", "command", "dims", "mesh", "workload", "levels", "summary",
                "peer"):
        assert key in d, key
    assert "--tiny" in d["command"] and d["mesh_exit"] == 0 and "error" not in d
    assert d["initial_warmup"]["requests"] == 4  # 2 x the largest c, before the levels
    assert d["mesh"]["audio"]["enabled"] is True and d["workload"]["ignore_eos"] is True
    assert [lv["concurrency"] for lv in d["levels"]] == [1, 2]
    for lv in d["levels"]:
        assert lv["requests"] == 3 and lv["requests_per_s"] > 0 and lv["output_tok_s"] > 0
        assert lv["latency_ms_p50"] <= lv["latency_ms_p95"] <= lv["latency_ms_p99"]
        assert len(lv["raw"]) == 3
        assert lv["level_s"] > 0 and {"audio", "thinker", "client"} <= set(lv["stages_whole_level"])
        assert lv["stages_whole_level"]["thinker"]["steps_per_s"] > 0
        for r in lv["raw"]:  # EOS ignored: every request streams exactly the tokens it asked for
            assert r["text_tokens"] == r["completion_tokens"] == TOKENS, r
            assert 0 < r["ttft_ms"] <= r["latency_ms"]
            assert r["prompt_tokens"] > 52  # 4 s of audio is 52 audio tokens, the template around them
            # the gateway's timing: its phases to the first token within the client's first text event
            assert r["gateway_timing_ms"]["first_token"] > 0 and r["gateway_timing_ms"]["audio.compute"] > 0
            assert r["gateway_timing_ms"]["total"] <= r["latency_ms"]
        assert lv["gateway_timing_ms"]["encode"]["p50"] <= lv["gateway_timing_ms"]["encode"]["p99"]
    indices = [r["index"] for lv in d["levels"] for r in lv["raw"]]
    assert len(set(indices)) == len(indices)  # each request its own clip
    s = d["summary"]
    assert s["c1_latency_ms_p50"]["ours"] == d["levels"][0]["latency_ms_p50"]
    assert s["c16_requests_per_s"]["ours"] is None and s["c16_requests_per_s"]["peer"] == 77.0


def test_clips_are_distinct_speech_like_wavs_of_the_asked_length() -> None:
    from bench.asr.clips import ClipBank
    from gateway.media.audio import decode_audio

    bank = ClipBank(4.0)
    bank.prepare(0, 3)
    assert len({bank[i] for i in range(3)}) == 3 and bank[1] == ClipBank(4.0)[1]  # distinct, reproducible
    samples = decode_audio(bank[0], "audio", 600.0).samples
    assert samples.shape == (64_000,) and 0.01 < float(samples.std()) < 0.5
