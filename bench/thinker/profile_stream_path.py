"""The text streaming path on CPU: the demo mesh (thinker and gateway, each its own process) under N concurrent
Chat streams. Reports tok/s, tokens per streamed message, engine steps, and the CPU time per token of the thinker
process, of its asyncio thread (the streaming path, which shares the GIL with the engine thread) and of the gateway,
so the model's compute and the streaming overhead can be told apart. CPU numbers are indicative only: the model,
both servers and this client share the machine's cores.

    python bench/thinker/profile_stream_path.py --out /tmp/stream.json                 # c=32, 128 tokens each
    python bench/thinker/profile_stream_path.py --out /tmp/s.json --profile-thinker /tmp/thinker.prof
    python -c "import pstats; pstats.Stats('/tmp/thinker.prof').sort_stats('tottime').print_stats(30)"

--profile-thinker (--profile-gateway) runs that process under cProfile timed by its main thread's CPU clock: it
sees only the asyncio thread (the streaming path), not the engine thread or the model.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import resource
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.thinker.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import yaml  # noqa: E402

from bench.thinker.gateway_loop import chat_request, closed_loop  # noqa: E402
from bench.thinker.proc_cpu import CpuTimes, cpu_times  # noqa: E402
from bench.thinker.workload import PromptMaker, summarize  # noqa: E402
from gateway.cli.supervisor import Child, Supervisor  # noqa: E402
from runtime.config import load_mesh_config, write_mesh_config  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402

log = logging.getLogger("profile_stream_path")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent Chat streams (closed loop)")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=128, help="tokens per request (EOS ignored)")
    p.add_argument("--measured-per-stream", type=int, default=2, help="measured requests per stream")
    p.add_argument("--rounds", type=int, default=2, help="closed-loop runs on the same mesh, reported each")
    p.add_argument("--flush-ms", type=float, default=None, help="thinker token_flush_ms (default: the config's)")
    p.add_argument("--profile-thinker", type=Path, default=None, help="cProfile output of the thinker process")
    p.add_argument("--profile-gateway", type=Path, default=None, help="cProfile output of the gateway process")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="OMP_NUM_THREADS of the stages: with more, idle OpenMP workers spin on the cores the "
                        "servers and the client need (0: leave it unset)")
    p.add_argument("--ready-timeout", type=float, default=300.0)
    return p.parse_args(argv)


def start_mesh(args: argparse.Namespace, model_dir: Path, workdir: Path) -> tuple[Supervisor, Child, Child]:
    """What `omnimesh up` starts for a text-only mesh, with the thinker optionally under cProfile."""
    engine: dict[str, Any] = {"max_num_seqs": args.concurrency, "kv_cache_bytes": 64 << 20, "cuda_graphs": False}
    if args.flush_ms is not None:
        engine["token_flush_ms"] = args.flush_ms
    off = {"enabled": False}
    raw = {"thinker": {"device": "cpu", "dtype": "float32", "engine": engine}, "vision": off, "audio": off,
           "talker": off}
    config = workdir / "mesh.yaml"
    config.write_text(yaml.safe_dump(raw))
    common = ["--config", str(config), "--model", str(model_dir), "--log-level", "WARNING"]
    stage = [*common, "--port", "0", "--metrics-port", "0", "--replica", "thinker-0"]
    sup = Supervisor("127.0.0.1")
    saved = os.environ.get("OMP_NUM_THREADS")
    if args.torch_threads > 0:
        os.environ["OMP_NUM_THREADS"] = str(args.torch_threads)  # the stage processes inherit it
    try:
        thinker = _start(sup, "thinker", "services.thinker", stage, args.profile_thinker, args.ready_timeout)
        mesh = load_mesh_config(config)
        write_mesh_config(replace(mesh, thinker=replace(mesh.thinker, address=f"127.0.0.1:{thinker.grpc_port}")),
                          config)
        gateway = _start(sup, "gateway", "gateway", [*common, "--replica", "gateway-0", "--port", "0",
                                                     "--metrics-port", "0"], args.profile_gateway, args.ready_timeout)
    except BaseException:
        sup.stop_all()
        raise
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    return sup, thinker, gateway


def _start(sup: Supervisor, name: str, module: str, argv: list[str], profile: Path | None,
           ready_timeout: float) -> Child:
    if profile is None:
        return sup.start(name, module, argv, ready_timeout)
    return sup.start(name, "bench.thinker.thread_cprofile", [str(profile), module, *argv], ready_timeout)


def step_totals(metrics_port: int) -> dict[str, float]:
    """The thinker's cumulative engine-step series: steps, seconds in steps, rows over all steps."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out = {}
    for key, series in (("steps", "omnimesh_step_time_seconds_count"), ("step_s", "omnimesh_step_time_seconds_sum"),
                        ("rows", "omnimesh_batch_size_sum")):
        match = re.search(rf"^{series}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
        out[key] = float(match.group(1)) if match else 0.0
    return out


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_round(args: argparse.Namespace, address: str, maker: PromptMaker, thinker: Child, gateway: Child,
              first_index: int) -> tuple[dict[str, Any], int]:
    """One closed-loop run and the CPU each process spent in it; returns its summary and the next request index."""
    c = args.concurrency
    measured = args.measured_per_stream * c
    requests = {i: chat_request(maker.make(i).text, args.output_tokens) for i in range(first_index,
                                                                                       first_index + 2 * c + measured)}
    t_cpu0, g_cpu0, c_cpu0 = cpu_times(thinker.process.pid), cpu_times(gateway.process.pid), client_cpu_s()
    steps0 = step_totals(thinker.metrics_port)
    t0 = time.perf_counter()
    records = asyncio.run(closed_loop(address, lambda i: requests.get(i) or chat_request(
        maker.make(i).text, args.output_tokens), c, c, measured, first_index))
    wall = time.perf_counter() - t0
    t_cpu: CpuTimes = cpu_times(thinker.process.pid) - t_cpu0
    g_cpu: CpuTimes = cpu_times(gateway.process.pid) - g_cpu0
    steps = {k: v - steps0[k] for k, v in step_totals(thinker.metrics_port).items()}
    tokens = sum(r.tokens for r in records)
    messages = sum(len(r.token_times) for r in records)
    level = summarize(records, c)
    level.pop("raw", None)
    us = 1e6 / max(tokens, 1)
    level.update(
        wall_s=wall, all_tokens=tokens, text_messages=messages, tokens_per_message=tokens / max(messages, 1),
        engine_steps=steps["steps"], step_ms_mean=steps["step_s"] / max(steps["steps"], 1) * 1e3,
        rows_per_step=steps["rows"] / max(steps["steps"], 1),
        cpu_us_per_token={"thinker_process": t_cpu.process_s * us, "thinker_asyncio_thread": t_cpu.main_thread_s * us,
                          "thinker_other_threads": (t_cpu.process_s - t_cpu.main_thread_s) * us,
                          "gateway_process": g_cpu.process_s * us, "client": (client_cpu_s() - c_cpu0) * us})
    return level, first_index + len(records)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    model_dir = resolve_model("demo")
    maker = PromptMaker(model_dir, args.prompt_tokens)
    sup, thinker, gateway = start_mesh(args, model_dir, Path(tempfile.mkdtemp(prefix="stream-path-")))
    result: dict[str, Any] = {"note": "CPU only; indicative (model, servers and client share the cores)",
                              "args": {k: str(v) for k, v in vars(args).items()}, "rounds": []}
    try:
        index = 0
        for _ in range(args.rounds):
            level, index = run_round(args, f"127.0.0.1:{gateway.grpc_port}", maker, thinker, gateway, index)
            result["rounds"].append(level)
            cpu = level["cpu_us_per_token"]
            log.info("c=%d: %.1f tok/s, TPOT p50 %.1f ms, %.2f tokens/message, step %.1f ms x %.1f rows; CPU us/token: "
                     "thinker %.0f (asyncio thread %.0f), gateway %.0f, client %.0f", args.concurrency,
                     level["output_tok_s"] or 0, level["tpot_ms_p50"] or 0, level["tokens_per_message"],
                     level["step_ms_mean"], level["rows_per_step"], cpu["thinker_process"],
                     cpu["thinker_asyncio_thread"], cpu["gateway_process"], cpu["client"])
    finally:
        sup.stop_all()  # SIGTERM lets a cProfile'd thinker write its profile
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
