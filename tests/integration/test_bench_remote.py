"""`omnimesh bench --addr` against the loopback text-only demo mesh, over gRPC and over the OpenAI API (the HTTP
front), with tiny limits: the result file's figures and provenance, and the workloads the mesh cannot serve skipped
with the reason."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.mesh_process import OMNIMESH, Proc, start

TOKENS = 4
TINY = ["--concurrency", "1", "2", "--output-tokens", str(TOKENS), "--measured-per-stream", "1",
        "--min-measured", "2"]


@pytest.fixture(scope="module")
def front(gateway_addr: str) -> Proc:
    from runtime.server import READY_PREFIX

    proc = start([OMNIMESH, "http", "--gateway-addr", gateway_addr, "--port", "0"], READY_PREFIX, timeout=60)
    yield proc
    assert proc.stop() == 0


def bench(out: Path, *flags: str) -> dict:
    run = subprocess.run([OMNIMESH, "bench", "--out", str(out), *TINY, *flags], capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 0, run.stderr
    return json.loads(out.read_text())


def check_levels(levels: list[dict]) -> None:
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["requests"] == max(2, lv["concurrency"]) and lv["output_tok_s"] > 0
        assert all(r["tokens"] == TOKENS for r in lv["raw"])  # EOS ignored: exactly the tokens asked for
        assert 0 < lv["ttft_ms_p50"] <= lv["ttft_ms_p99"] <= lv["e2e_ms_p99"]
        assert 0 < lv["itl_ms_p50"] <= lv["itl_ms_p99"]


def test_grpc_sweep_with_provenance_and_skips(gateway_addr: str, tmp_path: Path) -> None:
    result = bench(tmp_path / "grpc.json", "--addr", gateway_addr, "--api", "grpc", "--workloads", "text", "image",
                   "speech")
    assert result["command"].startswith("omnimesh bench") and "--addr" in result["command"]
    assert len(result["commit"].removesuffix("+dirty")) == 40 and result["date"]
    assert result["device"]["thinker"] == "cpu" and result["model_family"] == "qwen3-omni"
    check_levels(result["workloads"]["text"])
    for lv in result["workloads"]["text"]:  # the gateway's timing of each request (gRPC only), by phase
        assert lv["gateway_timing_ms"]["first_token"]["p50"] <= lv["gateway_timing_ms"]["first_token"]["p99"]
        assert all(r["gateway_timing_ms"]["total"] <= r["e2e_ms"] for r in lv["raw"])
    assert set(result["skipped"]) == {"image", "speech"} and "needs ('image', 'text')" in result["skipped"]["image"]
    assert (tmp_path / "grpc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the plot beside the JSON


def test_openai_sweep_through_the_http_front(front: Proc, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{front.ports['http_port']}/v1"
    result = bench(tmp_path / "openai.json", "--addr", url, "--api", "openai", "--workloads", "text", "speech")
    assert result["api"] == "openai" and result["model"] and result["device"] == "not reported by the OpenAI API"
    check_levels(result["workloads"]["text"])
    assert "gateway_timing_ms" not in result["workloads"]["text"][0]  # a streamed HTTP answer carries none
    assert list(result["skipped"]) == ["speech"] and "audio output" in result["skipped"]["speech"]


def test_addr_with_a_flag_that_starts_its_own_mesh_is_refused(tmp_path: Path) -> None:
    run = subprocess.run([OMNIMESH, "bench", "--out", str(tmp_path / "x.json"), "--addr", "127.0.0.1:1", "--tiny"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--tiny starts its own" in run.stderr


def test_no_connections_is_refused_naming_the_flag(tmp_path: Path) -> None:
    run = subprocess.run([OMNIMESH, "bench", "--out", str(tmp_path / "x.json"), "--addr", "127.0.0.1:1",
                          "--connections", "0"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--connections 0: at least 1" in run.stderr


def test_an_unreachable_deployment_fails_naming_it(tmp_path: Path) -> None:
    run = subprocess.run([OMNIMESH, "bench", "--out", str(tmp_path / "x.json"), "--addr", "127.0.0.1:1",
                          "--api-key", "k"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "UNAVAILABLE" in run.stderr and not (tmp_path / "x.json").exists()


def test_an_unreachable_openai_server_fails_naming_it(tmp_path: Path) -> None:
    run = subprocess.run([OMNIMESH, "bench", "--out", str(tmp_path / "x.json"), "--addr", "127.0.0.1:1",
                          "--api", "openai"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "http://127.0.0.1:1/v1/models" in run.stderr, run.stderr
