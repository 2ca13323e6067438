"""bench/http/overhead.py end to end on CPU: one demo mesh, both methods, both HTTP clients (raw SSE lines and the
official `openai` package), a result file that carries what the notes quote; and the comparisons' arithmetic."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.http.overhead import Sample, compare, compare_interleaved, main, start_mesh


@pytest.fixture(scope="module")
def mesh() -> tuple[str, str]:
    proc, grpc_addr, http_url = start_mesh()
    yield grpc_addr, http_url
    proc.stop()


@pytest.mark.parametrize("method,client", [("interleaved", "raw"), ("separate", "openai")])
def test_tiny_run_measures_both_paths(mesh: tuple[str, str], method: str, client: str, tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    grpc_addr, http_url = mesh
    assert main(["--grpc-addr", grpc_addr, "--http-url", http_url, "--concurrency", "1", "2", "--requests", "2",
                 "--rounds", "2", "--max-tokens", "4", "--method", method, "--http-client", client,
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {"commit", "date", "device", "command", "cpus"} <= set(result)
    assert (result["method"], result["http_client"]) == (method, client)
    assert set(result["by_concurrency"]) == {"1", "2"}
    for level in result["by_concurrency"].values():
        assert len(level["overhead_by_round_pct"]) == 2
        for path in ("grpc", "http"):
            assert level[path]["ttft_p50_ms"] > 0
            if method == "interleaved":  # 2 rounds of 2 x 2 streams, half on each path, 4 tokens each
                assert (level[path]["streams"], level[path]["tokens"]) == (4, 16)
            else:  # every request's 4 tokens counted, on each path by its own means (deltas; the usage chunk)
                assert all(abs(r["tok_per_s"] * r["wall_s"] - 8) < 1e-6 for r in level["runs"][path])


def test_compare_takes_medians_and_each_rounds_overhead() -> None:
    def run(tok_s: float, ttft: float) -> dict:
        return {"tok_per_s": tok_s, "ttft_p50_ms": ttft}

    summary = compare({"grpc": [run(100, 20), run(90, 30), run(110, 25)],
                       "http": [run(95, 26), run(81, 40), run(99, 27)]})
    assert summary["grpc"]["tok_per_s"] == 100 and summary["http"]["tok_per_s"] == 95
    assert summary["overhead_tok_per_s_pct"] == pytest.approx(5.0)
    assert summary["overhead_by_round_pct"] == pytest.approx([5.0, 10.0, 10.0])
    assert summary["ttft_p50_extra_ms"] == pytest.approx(2.0)


def test_interleaved_overhead_is_the_mean_stream_time_ratio() -> None:
    grpc = [Sample(0.010, 8, 0.100), Sample(0.030, 8, 0.140)]  # mean 120 ms
    http = [Sample(0.020, 8, 0.110), Sample(0.040, 8, 0.170)]  # mean 140 ms
    summary = compare_interleaved([{"grpc": grpc, "http": http}, {"grpc": grpc[:1], "http": http[:1]}])
    # pooled means 340/3 and 390/3 ms: a closed loop's tok/s is inverse to them
    assert summary["overhead_tok_per_s_pct"] == pytest.approx(100 * (1 - 340 / 390))
    assert summary["overhead_by_round_pct"] == pytest.approx([100 * (1 - 120 / 140), 100 * (1 - 100 / 110)])
    assert summary["grpc"]["ttft_p50_ms"] == pytest.approx(10.0)
    assert summary["http"]["ttft_p50_ms"] == pytest.approx(20.0)
    assert summary["grpc"]["streams"] == 3 and summary["http"]["tokens"] == 24
