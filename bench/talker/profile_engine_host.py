"""Host time of one talker engine iteration, by phase: N requests through the real SpeechCore (on EngineLoop) and TalkerRunner.

On CPU (the default) the runner takes the fast path (FrameGraphs / PrefillGraphs buffers, Code2Wav graph
bookkeeping) on the demo checkpoint, and its frame, prefill and Code2Wav forwards are stand-ins that cost no host
time and take the H200's measured time on a simulated device queue (`paced_talker.py`). With `--device cuda` it
is the service's GPU path on a random talker at the released dims, nothing paced. Every row is always ready (all
text up front; codec EOS suppressed on the GPU), and the asyncio side packs each chunk to protobuf as the servicer.

    python bench/talker/profile_engine_host.py --rows 1 8 32                   # CPU, phases in us per iteration
    python bench/talker/profile_engine_host.py --rows 32 --profile /tmp/eng    # + cProfile of the engine thread
    python bench/talker/profile_engine_host.py --rows 32 --count-ops           # + torch calls per iteration
    python bench/talker/profile_engine_host.py --device cuda --out bench/results/talker-engine-host-h200.json

Phases are timed on the engine thread's CPU clock on CPU (the paced waits are not in it) and on the wall clock
on CUDA (where a synchronisation may spin: `settle` is then mostly the wait for the frame, and the rest is what
the iteration adds to it, GIL waits included). `pre_launch` is the time from reading a frame's codes to the next
frame's launch, when the device idles. On CPU, tensor ops stand in for kernel launches: a small one costs about
what a launch does, but the uniforms are not small: a row's `torch.rand` of 33,792 values costs ~100 us here
against a ~5 us launch on the GPU, and stacking them (`noise_stack`) and copying them into the frame's buffers
(`frame_load`) are memory copies here, a launch each there. `bulk` sums those phases; `engine_less_bulk` is the
rest, the host work a GPU run pays as well.
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.talker.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.talker.engine_phases import Phases, instrument, undo  # noqa: E402
from bench.talker.paced_talker import PacedTalker, paced_decoder, paced_runner  # noqa: E402
from runtime.checkpoint import token_ids as T  # noqa: E402
from runtime.config import SpeechConfig  # noqa: E402
from runtime.engine.engine_loop import EngineLoop  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from services.talker.model.generate import TalkerRunner  # noqa: E402
from services.talker.model.load import load_talker_model  # noqa: E402
from services.talker.model.prompt import ASSISTANT_PREAMBLE, SpeechPrompt  # noqa: E402
from services.talker.model.sampling import GREEDY, TalkerSampling  # noqa: E402
from services.talker.model.state import TalkerState  # noqa: E402
from services.talker.request import AudioOut, SpeakInput  # noqa: E402
from services.talker.speech_core import MoreText, SpeechCore, TextEnd  # noqa: E402
from services.talker.wire import to_pb  # noqa: E402

log = logging.getLogger("profile_engine_host")
PROMPT = [T.IM_START, T.USER, T.NEWLINE, 5, 6, 7, 8, T.IM_END, T.NEWLINE, T.IM_START, T.ASSISTANT, T.NEWLINE]
TEXT = list(range(1000, 1024))  # ordinary thinker ids, all sent before the row starts: every row is always ready
FRAMES_PER_SECOND = 12.5
BULK = ("noise_draws", "noise_stack", "frame_load")  # on CPU, mostly the uniforms' size (see above)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (paced stand-ins) or a CUDA device (the real GPU path)")
    p.add_argument("--model", type=Path, default=None, help="checkpoint on CPU (default: the demo checkpoint)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32], help="concurrent requests (= engine rows)")
    p.add_argument("--frames", type=int, default=200, help="frames per request (its max_frames)")
    p.add_argument("--repeat", type=int, default=5,
                   help="runs per row count; the report holds each number's minimum (the least disturbed run's)")
    p.add_argument("--greedy", action="store_true", help="greedy requests (default: the model's seeded sampling)")
    p.add_argument("--frames-ahead", action="store_true", help="speech.frames_ahead: launch before reading codes")
    p.add_argument("--decodes-in-flight", type=int, default=1, help="speech.decodes_in_flight: Code2Wav decodes "
                   "left running while frames go on")
    p.add_argument("--frame-ms", type=float, default=None, help="CPU: paced frame time (default: the H200's)")
    p.add_argument("--count-ops", action="store_true",
                   help="count the engine thread's torch calls (a TorchFunctionMode; slows the run, skews its times)")
    p.add_argument("--profile", type=Path, default=None, help="cProfile (engine thread CPU clock) to PATH.rowsN.prof")
    p.add_argument("--out", type=Path, default=None, help="where to write the JSON results")
    return p.parse_args(argv)


class Setup:
    """The model, and per row count a runner (paced on CPU), its engine and its probes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.paced = self.device.type == "cpu"
        if self.paced:
            self.model = load_talker_model(args.model or resolve_model("demo"))
        else:  # released dims, random weights, the service's GPU path (bench_talker's model)
            from bench.talker.bench_talker import random_model, real_config
            from services.talker.model.config import parse_talker_config

            self.model = random_model(parse_talker_config(real_config()), str(self.device), torch.bfloat16)

    def runner(self, rows: int, speech: SpeechConfig) -> tuple[TalkerRunner, PacedTalker | None]:
        if self.paced:
            talker = paced_runner(self.model, rows, self.args.frames, len(PROMPT), speech.chunk_frames,
                                  self.args.frame_ms, ahead=speech.frames_ahead)
            return talker.runner, talker
        capacity = len(PROMPT) + ASSISTANT_PREAMBLE + self.args.frames + 1
        runner = TalkerRunner(self.model, rows, capacity, fast=True, cuda_graphs=True, defer=True,
                              ahead=speech.frames_ahead)
        runner.capture_graphs()
        runner.suppress[self.model.cfg.tokens.codec_eos] = True  # random weights: keep every row to its frames
        self.model.code2wav.enable_cuda_graphs(rows).warm_up(speech.first_chunk_frames, speech.chunk_frames,
                                                             speech.left_context_frames)  # fmt: skip
        return runner, None


class LaunchProbe:
    """Time and torch calls from reading a frame's codes (`settle`) to the next frame's launch, summed."""

    def __init__(self, runner: TalkerRunner, phases: Phases) -> None:
        self.phases = phases
        self.total_s, self.calls, self.counted, self.launches = 0.0, 0, 0, 0
        self._since: tuple[float, int] | None = None
        settle, run = runner.settle, runner.frames.run  # type: ignore[union-attr]

        def settle_then_mark(keep: int = 0) -> list[TalkerState]:
            read = runner.has_pending  # step() settles again, with nothing left to read: not a new start
            ended = settle(keep)
            if read and not keep:  # frames ahead (keep=1): the next frame was launched before this read
                self._since = phases.clock(), phases.op_count
            return ended

        def run_then_mark(*args: Any, **kwargs: Any) -> Any:
            out = run(*args, **kwargs)  # on CUDA the replay is launched, not waited for
            self.launches += 1
            if self._since is not None:  # the first frame, and any after the rows waited, follow no frame
                clock, ops = self._since
                self.total_s += phases.clock() - clock
                self.calls += phases.op_count - ops
                self.counted += 1
                self._since = None
            return out

        runner.settle = settle_then_mark  # type: ignore[method-assign]
        runner.frames.run = run_then_mark  # type: ignore[union-attr, method-assign]

    def reset(self) -> None:
        self.total_s, self.calls, self.counted, self.launches = 0.0, 0, 0, 0
        self._since = None


async def speak(engine: EngineLoop, key: int, inp: SpeakInput, groups: int, audio_frames: list[int]) -> None:
    async with engine.submit(key, inp, inp.request_id) as stream:
        stream.send(MoreText(key, TEXT))
        stream.send(TextEnd(key))
        while isinstance(out := await stream.next(), AudioOut):
            to_pb(out, groups)  # what the servicer does with each chunk, on this (the asyncio) thread
            audio_frames[0] += out.num_frames


async def drive(engine: EngineLoop, rows: int, args: argparse.Namespace, voice: str,
                groups: int) -> tuple[int, float, float]:  # fmt: skip
    """All requests at once; returns frames of audio received, wall seconds and the asyncio thread's CPU seconds."""
    audio_frames = [0]
    inputs = [SpeakInput(f"r{i}", SpeechPrompt(PROMPT, voice),
                         GREEDY if args.greedy else TalkerSampling(seed=i), args.frames, return_codes=False)
              for i in range(rows)]  # fmt: skip
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(speak(engine, key, inp, groups, audio_frames) for key, inp in enumerate(inputs)))
    return audio_frames[0], time.perf_counter() - wall0, time.thread_time() - cpu0


def measure(setup: Setup, rows: int) -> list[dict[str, Any]]:
    """`--repeat` runs of `rows` requests on one engine; one result per run."""
    args, model = setup.args, setup.model
    speech = SpeechConfig(max_rows=rows, max_frames=args.frames, max_prompt_tokens=len(PROMPT),
                          frames_ahead=args.frames_ahead, decodes_in_flight=args.decodes_in_flight)
    runner, paced = setup.runner(rows, speech)
    engine = EngineLoop(SpeechCore(runner, speech, frozenset({T.IM_END})))  # warms up before serving
    if paced is not None:
        paced_decoder(engine.core._chunks, paced.side)  # type: ignore[attr-defined]
    queue = paced.queue if paced is not None else None
    phases = Phases(time.thread_time if setup.paced else time.perf_counter, args.count_ops, args.profile is not None)
    probe = LaunchProbe(runner, phases)
    restore = instrument(runner, phases)
    voice = next(iter(model.cfg.speakers))
    results = []
    try:
        for _ in range(args.repeat):
            phases.reset()
            probe.reset()
            busy0 = queue.busy_s if queue is not None else 0.0
            frames, wall, asyncio_cpu = asyncio.run(drive(engine, rows, args, voice, model.cfg.num_code_groups))
            if not phases.idle.wait(timeout=60):  # the iteration that sent the last finish is still being timed
                raise RuntimeError("the talker engine did not go idle after the run")
            busy = queue.busy_s - busy0 if queue is not None else None
            results.append(summarize(rows, args, phases, probe, frames, wall, asyncio_cpu, busy))
    finally:
        undo(restore)
        engine.close()
    if phases.profile is not None:
        path = args.profile.with_name(f"{args.profile.name}.rows{rows}.prof")
        phases.profile.dump_stats(path)
        text = io.StringIO()
        pstats.Stats(phases.profile, stream=text).sort_stats("tottime").print_stats(30)
        log.info("engine thread profile (%s):\n%s", path, text.getvalue())
    return results


def summarize(rows: int, args: argparse.Namespace, phases: Phases, probe: LaunchProbe, frames: int, wall: float,
              asyncio_cpu: float, device_busy: float | None) -> dict[str, Any]:  # fmt: skip
    iterations = phases.calls["iterate_other"]
    per_iter: Callable[[float], float] = lambda s: 1e6 * s / max(iterations, 1)  # noqa: E731
    by_phase = {k: round(per_iter(v), 1) for k, v in sorted(phases.seconds.items())}
    engine = per_iter(sum(phases.seconds.values()))
    result: dict[str, Any] = {
        "rows": rows, "frames_per_request": args.frames, "sampling": "greedy" if args.greedy else "seeded",
        "frames_ahead": args.frames_ahead, "decodes_in_flight": args.decodes_in_flight,
        "device": args.device, "clock": "thread CPU" if device_busy is not None else "wall",
        "iterations": iterations, "launches": probe.launches, "audio_s_per_s": frames / FRAMES_PER_SECOND / wall,
        "wall_us_per_iter": per_iter(wall), "engine_us_per_iter": engine,
        "pre_launch_us_per_frame": 1e6 * probe.total_s / max(probe.counted, 1),
        "asyncio_cpu_us_per_iter": per_iter(asyncio_cpu), "phases_us_per_iter": by_phase,
    }  # fmt: skip
    if device_busy is not None:  # the simulated device's time, and what the CPU spends in place of launches
        result["device_busy_us_per_iter"] = per_iter(device_busy)
        result["bulk_us_per_iter"] = sum(by_phase.get(k, 0.0) for k in BULK)
        result["engine_less_bulk_us_per_iter"] = engine - result["bulk_us_per_iter"]
    if phases.ops is not None:
        result["torch_calls_per_iter"] = phases.ops.count / max(iterations, 1)
        result["pre_launch_torch_calls_per_frame"] = probe.calls / max(probe.counted, 1)
        top = sorted(phases.ops.by_name.items(), key=lambda kv: -kv[1])[:15]
        result["torch_calls_top"] = {k: round(v / max(iterations, 1), 2) for k, v in top}
    return result


def least_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's minimum over the runs: a shared VM's timings vary by up to 2x from run to run, and what a run
    costs at least is the work itself (throughput, a larger-is-better number, takes its maximum)."""
    def merge(values: list[Any], key: str = "") -> Any:
        if isinstance(values[0], dict):
            return {k: merge([v.get(k, 0.0) for v in values], k) for k in values[0]}
        if isinstance(values[0], (int, float)) and not isinstance(values[0], bool):
            return max(values) if key == "audio_s_per_s" else min(values)
        return values[0]

    return merge(runs)


def report(r: dict[str, Any]) -> None:
    rows = r["rows"]
    bulk = f" ({r['engine_less_bulk_us_per_iter']:.0f} less bulk)" if "bulk_us_per_iter" in r else ""
    device = f" against {r['device_busy_us_per_iter']:.0f} us of device work" if "device_busy_us_per_iter" in r else ""
    log.info("rows %d: engine %.0f us/iteration%s (%s), pre-launch %.0f us/frame, asyncio CPU %.0f us/iteration, "
             "wall %.0f us/iteration%s, %.1f audio-s/s\n  phases us/iteration: %s", rows, r["engine_us_per_iter"],
             bulk, r["clock"], r["pre_launch_us_per_frame"], r["asyncio_cpu_us_per_iter"], r["wall_us_per_iter"],
             device, r["audio_s_per_s"], json.dumps(r["phases_us_per_iter"]))
    if "torch_calls_per_iter" in r:
        log.info("rows %d: %.1f torch calls/iteration, %.1f of them before the frame's launch; most: %s", rows,
                 r["torch_calls_per_iter"], r["pre_launch_torch_calls_per_frame"], json.dumps(r["torch_calls_top"]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)  # a GPU talker's host does no intra-op work; spinning workers would steal the cores
    setup = Setup(args)
    results = []
    for rows in args.rows:
        results.append(least_of(measure(setup, rows)))
        report(results[-1])
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
