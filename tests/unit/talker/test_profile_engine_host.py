"""The engine host-time harness runs end to end on the demo checkpoint (a smoke test; its numbers are its output)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.talker.profile_engine_host import main
from services.talker.speech_core import SpeechCore


def test_tiny_run_reports_every_phase(demo_ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    iterate = SpeechCore.__dict__["step"]
    main(["--model", str(demo_ckpt), "--rows", "1", "2", "--frames", "6", "--repeat", "2", "--count-ops",
          "--out", str(out)])
    results = json.loads(out.read_text())
    assert [r["rows"] for r in results] == [1, 2]
    for r in results:
        assert r["iterations"] >= r["launches"] >= 6 and r["audio_s_per_s"] > 0  # rows may start apart
        assert r["phases_us_per_iter"]["frame_step"] > 0 and r["phases_us_per_iter"]["decode_streams"] > 0
        assert r["device_busy_us_per_iter"] > 0 and r["engine_us_per_iter"] > r["engine_less_bulk_us_per_iter"]
        assert r["torch_calls_per_iter"] > r["pre_launch_torch_calls_per_frame"] > 0
    assert SpeechCore.__dict__["step"] is iterate  # the phase timers are taken off again


def test_decodes_left_in_flight_run_to_the_end(demo_ckpt: Path, tmp_path: Path) -> None:
    """Frames ahead with Code2Wav decodes left running on the paced side queue: every request's audio comes out."""
    out = tmp_path / "host.json"
    main(["--model", str(demo_ckpt), "--rows", "2", "--frames", "12", "--repeat", "1", "--frames-ahead",
          "--decodes-in-flight", "3", "--out", str(out)])
    (r,) = json.loads(out.read_text())
    assert r["frames_ahead"] and r["decodes_in_flight"] == 3
    assert r["audio_s_per_s"] > 0 and r["phases_us_per_iter"]["decode_streams"] > 0
