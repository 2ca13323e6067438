"""The thinker's streaming path alone: the real server stack (interceptor, servicer, service, EngineLoop, Engine,
sampler, detokeniser) over a PacedRunner whose steps take a fixed GIL-free time like a GPU's, driven by N
concurrent Thinker.Generate streams. What it measures is what the thinker process spends per token besides the
model, and how far that stretches the engine's steps (the asyncio thread shares the GIL with the engine thread).

    python bench/thinker/stream_path_micro.py --step-ms 11 --concurrency 32      # the H200's c=32 step
    python bench/thinker/stream_path_micro.py --step-ms 4 --concurrency 1        # its c=1 step

CPU only; the numbers are indicative (a real step also has the GPU's launches and syncs).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.thinker.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grpc  # noqa: E402
import torch  # noqa: E402

from bench.thinker.paced_runner import PacedRunner  # noqa: E402
from bench.thinker.proc_cpu import cpu_times  # noqa: E402
from bench.thinker.profile_stream_path import step_totals  # noqa: E402
from omnimesh.v1 import common_pb2, thinker_pb2, thinker_pb2_grpc  # noqa: E402
from runtime.config import SamplingDefaults, ServerConfig  # noqa: E402
from runtime.engine.block_manager import BlockManager  # noqa: E402
from runtime.engine.cache_events import CacheEventLog  # noqa: E402
from runtime.engine.engine import Engine  # noqa: E402
from runtime.engine.engine_loop import EngineLoop  # noqa: E402
from runtime.engine.scheduler import Scheduler, SchedulerLimits  # noqa: E402
from runtime.engine.token_core import TokenCore  # noqa: E402
from runtime.metrics import Metrics  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from runtime.server import READY_PREFIX, StageServer, announce_ready  # noqa: E402
from runtime.tokenizer import Tokenizer  # noqa: E402
from services.thinker.cache_report import CacheReporter  # noqa: E402
from services.thinker.model import ThinkerConfig  # noqa: E402
from services.thinker.service import ThinkerService  # noqa: E402
from services.thinker.servicer import ThinkerServicer  # noqa: E402

log = logging.getLogger("stream_path_micro")
PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]  # "<|im_start|>user\nHello<|im_end|>\n..."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="where to write the JSON results")
    p.add_argument("--step-ms", type=float, default=11.0, help="GIL-free time of one engine step")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=256, help="tokens per request (EOS ignored)")
    p.add_argument("--requests-per-stream", type=int, default=3)
    p.add_argument("--flush-ms", type=float, default=15.0, help="the thinker's token_flush_ms")
    p.add_argument("--logprobs", type=int, default=-1, help="top logprobs per token (-1: none requested)")
    p.add_argument("--profile", type=Path, default=None, help="cProfile of the server's asyncio thread (CPU clock)")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server child
    return p.parse_args(argv)


def paced_engine(args: argparse.Namespace) -> tuple[Engine, Scheduler, int]:
    """The thinker's Engine over a PacedRunner; returns it, its scheduler and max_model_len."""
    # One intra-op thread: the sampler's CPU ops would otherwise leave OpenMP workers spinning on the cores the
    # streams need (a GPU thinker samples on the device).
    torch.set_num_threads(1)
    max_len = 4096
    scheduler = Scheduler(SchedulerLimits(args.concurrency, 2048, max_len),
                          BlockManager(args.concurrency * max_len // 16 + 1, 16, events=CacheEventLog()))
    return Engine(scheduler, PacedRunner(args.step_ms / 1000)), scheduler, max_len


async def serve(args: argparse.Namespace) -> None:
    """The thinker stage as services/thinker/build.py assembles it, with a PacedRunner for the model."""
    model_dir = resolve_model("demo")
    metrics = Metrics("thinker", "micro")
    server = StageServer("thinker", "micro", ServerConfig(port=0, metrics_port=0), metrics)
    engine, scheduler, max_len = paced_engine(args)
    engine_loop = EngineLoop(TokenCore(engine), metrics)
    service = ThinkerService(engine_loop, Tokenizer.from_dir(model_dir), metrics, max_len, args.flush_ms / 1000,
                             args.concurrency + 256)
    servicer = ThinkerServicer(service, ThinkerConfig.from_checkpoint(model_dir), SamplingDefaults(),
                               common_pb2.StageInfo(stage="thinker"), CacheReporter(scheduler))
    server.add_service(thinker_pb2_grpc.add_ThinkerServicer_to_server, servicer, "omnimesh.v1.Thinker")
    announce_ready(await server.start())
    try:
        await server.serve_until_signal()
    finally:
        engine_loop.close()


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, dict[str, int]]:
    profile = [] if args.profile is None else ["bench.thinker.thread_cprofile", str(args.profile)]
    cmd = [sys.executable, "-m", *profile, "bench.thinker.stream_path_micro", "--serve", "--step-ms",
           str(args.step_ms), "--concurrency", str(args.concurrency), "--flush-ms", str(args.flush_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(READY_PREFIX):
            return proc, json.loads(line[len(READY_PREFIX):])
    raise RuntimeError(f"the thinker did not start (exit {proc.wait()})")


async def one_request(stub: thinker_pb2_grpc.ThinkerStub, args: argparse.Namespace, counts: list[int]) -> None:
    sampling = common_pb2.SamplingParams(temperature=0.0, max_tokens=args.output_tokens, ignore_eos=True)
    if args.logprobs >= 0:
        sampling.logprobs = True
        sampling.top_logprobs = args.logprobs

    async def requests():  # noqa: ANN202
        yield thinker_pb2.GenerateRequest(start=thinker_pb2.GenerateStart(token_ids=PROMPT, sampling=sampling))

    async for msg in stub.Generate(requests()):
        if msg.WhichOneof("msg") == "tokens":
            counts[0] += len(msg.tokens.token_ids)
            counts[1] += 1


async def warm_up(address: str, args: argparse.Namespace) -> None:
    """One request first: the detokeniser builds its table, gRPC opens its first call."""
    async with grpc.aio.insecure_channel(address) as channel:
        await one_request(thinker_pb2_grpc.ThinkerStub(channel), args, [0, 0])


async def drive(address: str, args: argparse.Namespace) -> tuple[int, int, float]:
    """Closed loop: each stream runs its requests back to back. Returns tokens, messages, seconds."""
    counts = [0, 0]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = thinker_pb2_grpc.ThinkerStub(channel)

        async def stream() -> None:
            for _ in range(args.requests_per_stream):
                await one_request(stub, args, counts)

        t0 = time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(args.concurrency)))
        return counts[0], counts[1], time.perf_counter() - t0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    proc, ports = start_server(args)
    address = f"127.0.0.1:{ports['grpc_port']}"
    try:
        asyncio.run(warm_up(address, args))
        cpu0, steps0 = cpu_times(proc.pid), step_totals(ports["metrics_port"])
        tokens, messages, wall = asyncio.run(drive(address, args))
        cpu, steps = cpu_times(proc.pid) - cpu0, step_totals(ports["metrics_port"])
    finally:
        proc.terminate()  # SIGTERM: the server drains, and a profiled one writes its profile
        proc.wait(timeout=60)
    num_steps = steps["steps"] - steps0["steps"]
    step_ms = (steps["step_s"] - steps0["step_s"]) / max(num_steps, 1) * 1e3
    us = 1e6 / max(tokens, 1)
    return {"step_ms_paced": args.step_ms, "concurrency": args.concurrency, "flush_ms": args.flush_ms,
            "tok_s": tokens / wall, "tokens": tokens, "tokens_per_message": tokens / max(messages, 1),
            "steps": num_steps, "step_ms_mean": step_ms, "wall_ms_per_step": wall / max(num_steps, 1) * 1e3,
            "cpu_us_per_token": {"process": cpu.process_s * us, "asyncio_thread": cpu.main_thread_s * us,
                                 "other_threads": (cpu.process_s - cpu.main_thread_s) * us}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        logging.basicConfig(level=logging.WARNING)
        asyncio.run(serve(args))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    result = measure(args)
    cpu = result["cpu_us_per_token"]
    log.info("step %.1f ms paced, c=%d, flush %.0f ms: %.0f tok/s, %.2f tokens/message, wall per step %.2f ms "
             "(engine step %.2f ms); thinker CPU us/token %.0f (asyncio thread %.0f, other threads %.0f)",
             args.step_ms, args.concurrency, args.flush_ms, result["tok_s"],
             result["tokens_per_message"], result["wall_ms_per_step"], result["step_ms_mean"], cpu["process"],
             cpu["asyncio_thread"], cpu["other_threads"])
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
