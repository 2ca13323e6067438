"""The text->speech benchmark runs end to end on the demo checkpoint (a smoke test; numbers come from the GPU)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.talker.bench_speech_mesh import SpeechRecord, main


def test_viability_counts_chunks_that_arrive_before_the_audio_runs_out() -> None:
    rec = SpeechRecord(0.0, True, [(1.0, 0.5), (1.4, 2.0), (5.0, 1.0)])
    assert rec.viable_share() == 0.5  # the second arrived in time, the third after the audio ran out at 3.4 s


def test_tiny_run_writes_every_level(demo_ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "speech.json"
    main(["--tiny", "--model", str(demo_ckpt), "--out", str(out)])
    result = json.loads(out.read_text())
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 2]
    for level in result["levels"]:
        assert level["requests"] >= level["concurrency"] and level["audio_s_per_s"] > 0
        assert level["ttfa_ms_p50"] > 0
