"""Where arrivals fall within a step decides what late launch (thinker.engine.late_launch) can give: a CPU model.

The engine, its loop and the token core are the served ones (runtime/engine); the runner is the tests' fake over a
modelled device: each step takes --step-ms on the device after the host's --launch-ms, and its tokens become
readable (the engine thread spinning, as on a CUDA event) only when it ends. Requests of 32 prompt tokens and
--output-tokens answers arrive three ways, each run with the launch ahead at once and late:
- closed: each of --concurrency clients sends its next request as its last one ends (the benchmarks' loop): arrivals
  follow a step's tokens by the delivery time, before the engine's next launch, so either way they join the next step;
- think: the same clients wait a uniform 0..--think-ms before each next request (arrivals spread over the step);
- open: Poisson arrivals at the rate that keeps --concurrency requests in flight.
Prints and writes TTFT p50 / mean per (arrivals, launch). A model of arrival timing, not a GPU measurement.

    PYTHONPATH=.:protos python bench/thinker/late_launch_model.py --out bench/results/late-launch-model-cpu.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.thinker.bench_thinker import provenance_of
from runtime.engine import engine as engine_module
from runtime.engine.block_manager import BlockManager
from runtime.engine.engine import Engine
from runtime.engine.engine_loop import EngineLoop
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import Scheduler, SchedulerLimits
from runtime.engine.token_core import TokenCore
from tests.unit.engine.engine_fakes import FakeRunner, make_seq


class ModelledDevice:
    """Steps run one after another on the device, `step_s` each; a launch costs the host `launch_s` (slept, so the
    GIL is free as it is during a kernel launch's driver call); reading a step's draws spins until its end."""

    def __init__(self, step_s: float, launch_s: float) -> None:
        self.step_s, self.launch_s = step_s, launch_s
        self.free_at = 0.0
        self._sample = engine_module.launch_sample

    def launch_sample(self, *args: Any, **kwargs: Any) -> Any:
        pending = self._sample(*args, **kwargs)
        time.sleep(self.launch_s)
        self.free_at = max(time.perf_counter(), self.free_at) + self.step_s
        return _Draws(pending, self.free_at)


class _Draws:
    def __init__(self, pending: Any, end: float) -> None:
        self.tokens, self._pending, self._end = pending.tokens, pending, end

    def result(self) -> Any:
        while time.perf_counter() < self._end:
            pass
        return self._pending.result()


async def _one(loop: EngineLoop, output_tokens: int, ttfts: list[float]) -> None:
    seq = make_seq(32, SamplingOptions(temperature=0.0, max_tokens=output_tokens))
    began = time.perf_counter()
    async with loop.submit(seq.seq_id, seq) as stream:
        await stream.take()
        ttfts.append(time.perf_counter() - began)
        while not stream.finished:
            await stream.take()


async def _arrivals(kind: str, loop: EngineLoop, args: argparse.Namespace, ttfts: list[float]) -> None:
    rng = random.Random(args.seed)
    if kind == "open":  # Little's law: c in flight for requests of about (output_tokens + 1) steps
        gap = (args.output_tokens + 1) * args.step_ms / 1000 / args.concurrency
        tasks = []
        for _ in range(args.requests):
            tasks.append(asyncio.create_task(_one(loop, args.output_tokens, ttfts)))
            await asyncio.sleep(rng.expovariate(1 / gap))
        await asyncio.gather(*tasks)
        return

    async def client() -> None:
        while len(ttfts) < args.requests:
            if kind == "think":
                await asyncio.sleep(rng.uniform(0, args.think_ms / 1000))
            await _one(loop, args.output_tokens, ttfts)

    await asyncio.gather(*(client() for _ in range(args.concurrency)))


def run(kind: str, late_launch: bool, args: argparse.Namespace) -> dict[str, float]:
    device = ModelledDevice(args.step_ms / 1000, args.launch_ms / 1000)
    engine_module.launch_sample = device.launch_sample
    try:
        blocks = BlockManager(4096, 16, enable_prefix_cache=False)
        scheduler = Scheduler(SchedulerLimits(4 * args.concurrency, 4096, 4096), blocks)
        engine = Engine(scheduler, FakeRunner(blocks, 50, run_ahead=True), late_launch=late_launch)
        loop = EngineLoop(TokenCore(engine))
        ttfts: list[float] = []
        try:
            asyncio.run(_arrivals(kind, loop, args, ttfts))
        finally:
            loop.close()
    finally:
        engine_module.launch_sample = device._sample
    measured = [t * 1000 for t in ttfts[args.concurrency:]]  # past the first wave, which arrives all at once
    return {"ttft_ms_p50": statistics.median(measured), "ttft_ms_mean": statistics.fmean(measured),
            "requests": len(measured)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--step-ms", type=float, default=15.0)
    p.add_argument("--launch-ms", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--output-tokens", type=int, default=24)
    p.add_argument("--requests", type=int, default=120)
    p.add_argument("--think-ms", type=float, default=30.0)
    p.add_argument("--arrivals", nargs="+", choices=("closed", "think", "open"), default=["closed", "think", "open"])
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    command = " ".join(["bench/thinker/late_launch_model.py", *(argv if argv is not None else sys.argv[1:])])
    result: dict[str, Any] = {**provenance_of(command, torch.device("cpu")),
                              "model": "runtime/engine on a modelled device (bench/thinker/late_launch_model.py)",
                              "flags": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "runs": []}
    for kind in args.arrivals:
        for late in (False, True):
            run_result = {"arrivals": kind, "late_launch": late, **run(kind, late, args)}
            result["runs"].append(run_result)
            print(json.dumps(run_result), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
