"""The streaming-path harnesses on CPU: the paced micro bench, the demo-mesh profile, and their CPU/profile helpers."""
from __future__ import annotations

import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

from bench.thinker import profile_stream_path, stream_path_micro
from bench.thinker.proc_cpu import cpu_times

ROOT = Path(__file__).resolve().parents[3]


def test_micro_bench_streams_every_token_through_the_real_server(tmp_path: Path) -> None:
    out = tmp_path / "micro.json"
    # enough tokens that the asyncio thread's CPU spans several of /proc's 10 ms ticks (with 96 it saw none at times)
    assert stream_path_micro.main(["--out", str(out), "--step-ms", "2", "--concurrency", "4", "--output-tokens",
                                   "48", "--requests-per-stream", "4", "--flush-ms", "5"]) == 0
    result = json.loads(out.read_text())
    assert result["tokens"] == 4 * 4 * 48 and result["tok_s"] > 0
    assert 1.0 <= result["tokens_per_message"] <= 48 and result["steps"] >= 4 * 48
    cpu = result["cpu_us_per_token"]
    assert cpu["asyncio_thread"] > 0 and cpu["process"] >= cpu["asyncio_thread"]


def test_mesh_profile_reports_tokens_messages_steps_and_cpu(tmp_path: Path) -> None:
    out = tmp_path / "mesh.json"
    assert profile_stream_path.main(["--out", str(out), "--concurrency", "2", "--output-tokens", "6",
                                     "--measured-per-stream", "1", "--rounds", "1", "--ready-timeout", "180"]) == 0
    (level,) = json.loads(out.read_text())["rounds"]
    assert level["requests"] == 2 and level["all_tokens"] >= 2 * 6 and level["text_messages"] >= 2
    assert level["engine_steps"] > 0 and level["rows_per_step"] > 0
    assert set(level["cpu_us_per_token"]) == {"thinker_process", "thinker_asyncio_thread", "thinker_other_threads",
                                              "gateway_process", "client"}
    assert level["cpu_us_per_token"]["thinker_process"] > 0


def test_cpu_times_count_this_process_and_its_main_thread() -> None:
    before = cpu_times(os.getpid())
    end = time.thread_time() + 0.2
    while time.thread_time() < end:
        pass
    spent = cpu_times(os.getpid()) - before
    # the two files are read a moment apart, and the kernel scales the process's and the thread's ticks apart: a CI
    # run read the main thread 2 ticks past the process (0.21 against 0.19 s), so allow 3
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0.2 - 3 * tick <= spent.main_thread_s <= spent.process_s + 3 * tick


def test_thread_cprofile_writes_the_stats_of_a_module_that_exits(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    # json.tool exits through SystemExit on a bad file: the profile is still written, the exit code kept
    run = subprocess.run([sys.executable, "-m", "bench.thinker.thread_cprofile", str(out), "json.tool",
                          str(tmp_path / "missing.json")], cwd=ROOT, capture_output=True, check=False)
    assert run.returncode == 2
    stats = pstats.Stats(str(out))
    assert any(fn[0].endswith("tool.py") for fn in stats.stats)  # type: ignore[attr-defined]


def test_thread_cprofile_without_a_module_says_how_to_call_it() -> None:
    run = subprocess.run([sys.executable, "-m", "bench.thinker.thread_cprofile", "/tmp/x.prof"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "usage: python -m bench.thinker.thread_cprofile OUT MODULE" in run.stderr


def test_thread_cprofile_reports_a_module_that_does_not_exist(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "bench.thinker.thread_cprofile", str(tmp_path / "p"),
                          "bench.thinker.no_such_module"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "No module named" in run.stderr
