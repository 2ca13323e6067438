"""The persistent dense decoder step (runtime/kernels/dense_step.py) at the code predictor's dims: a frame's 15 steps
(the first two positions a row) as one CUDA graph, persistent (grid barriers between phases) against the same kernel
launched once per phase, over tilings; writes JSON.

Run on the GPU machine:  PYTHONPATH=. python bench/kernels/bench_dense_step.py --out dense.json [--rows 1 8 16]
A figure is the median over --repeats replays of the graph (CUDA events), divided by 15: microseconds a step. The
step reads 154 MB of layer weights and a 4 MB head: `floor_us` is that at the --copy-gbs bandwidth. `--profile` adds
each phase's median kernel time, the phases launched one by one (`phase_us` in the JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from runtime.kernels.dense_step import DenseStepBuffers, Tiling, default_tiling, dense_step
from tests.unit.kernels.test_kernel_dense_step_gpu import POSITIONS, frame_inputs, predictor_like

# measured 2026-12-07 (bench/kernels/NOTES.md run 12): o_proj / down split in 2 the fastest; 4 stages, K tiles of
# 64 or 256 and 64-wide tiles no faster; an L2 prefetch of the next phase's weights 4% slower (removed)
TILINGS = [Tiling(32, 16, 128, num_stages=3), Tiling(32, 16, 128, num_stages=3, split_narrow=2),
           Tiling(32, 16, 128, num_stages=3, split_narrow=4), Tiling(32, 16, 128, num_stages=2, split_narrow=2)]


def frame_runner(stack, heads, cos, sin, rows: int, persistent: bool, tiling: Tiling):  # noqa: ANN001, ANN201
    """A function that runs a frame's 15 steps of `rows` rows (the first two positions a row) on fresh buffers."""
    buffers = DenseStepBuffers.allocate(stack, 16, POSITIONS)
    inputs = frame_inputs(rows, seed=rows)
    logits = torch.empty(rows, heads[0].shape[0], device="cuda")

    def run() -> None:
        start = 0
        for head, x in zip(heads, inputs):
            steps = x.shape[1]
            buffers.s0[:rows * steps].copy_(x.reshape(rows * steps, -1))
            dense_step(stack, head, buffers, rows, steps, start, cos, sin, logits, persistent, tiling)
            start += steps

    return run


def frame_us(stack, heads, cos, sin, rows: int, persistent: bool, tiling: Tiling,  # noqa: ANN001
             repeats: int) -> float:
    run = frame_runner(stack, heads, cos, sin, rows, persistent, tiling)
    run()  # compiles
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    times = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3 / len(heads))
    return statistics.median(times)


def phase_us(stack, heads, cos, sin, rows: int, tiling: Tiling, repeats: int) -> list[float]:  # noqa: ANN001
    """Median device microseconds of each phase (launched one per phase, as the profiler sees kernels), over the
    frame's 15 steps and `repeats` frames: where a persistent step's time goes."""
    from torch.profiler import ProfilerActivity, profile

    from runtime.kernels.dense_step_triton import PHASES_PER_LAYER  # imports triton

    run = frame_runner(stack, heads, cos, sin, rows, False, tiling)
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA" and "dense_step" in e.name),
                     key=lambda e: e.time_range.start)
    phases = stack.layers * PHASES_PER_LAYER + 1
    return [statistics.median(e.time_range.elapsed_us() for e in kernels[p::phases]) for p in range(phases)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--copy-gbs", type=float, default=3000.0, help="the card's measured copy bandwidth, GB/s")
    parser.add_argument("--sweep", action="store_true", help="every tiling of TILINGS, not only the default")
    parser.add_argument("--profile", action="store_true", help="also each phase's time, launched one per phase")
    args = parser.parse_args(argv)
    stack, heads, cos, sin = predictor_like(0)
    weight_bytes = sum(t.numel() * t.element_size() for t in stack[:4]) + heads[0].numel() * 2
    tilings = TILINGS if args.sweep else [default_tiling(stack, heads[0])]
    runs = []
    for rows in args.rows:
        for tiling in tilings:
            for persistent in (True, False):
                try:
                    us = frame_us(stack, heads, cos, sin, rows, persistent, tiling, args.repeats)
                except Exception as err:  # noqa: BLE001 - a tiling that does not compile is a result too
                    runs.append({"rows": rows, "tiling": tiling._asdict(), "persistent": persistent,
                                 "error": repr(err)[:300]})
                    continue
                runs.append({"rows": rows, "tiling": tiling._asdict(), "persistent": persistent, "us_per_step": us})
                print(rows, tiling, "persistent" if persistent else "phases", f"{us:.1f} us/step", flush=True)
    profiles = {}
    if args.profile:
        names = [f"{layer}.{kind}" for layer in range(stack.layers) for kind in ("qkv", "attn", "o", "gate_up", "down")]
        for rows in args.rows:
            for split in (1, 2):
                tiling = default_tiling(stack, heads[0])._replace(split_narrow=split)
                us = dict(zip(names + ["head"], phase_us(stack, heads, cos, sin, rows, tiling, 10)))
                profiles[f"rows {rows}, split {split}"] = us
                print(rows, split, "phases us:", {k: round(v, 1) for k, v in us.items()}, flush=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    result = {"commit": os.environ.get("OMNIMESH_COMMIT") or head, "device": torch.cuda.get_device_name(),
              "command": " ".join(sys.argv),
              "weight_bytes_per_step": weight_bytes, "floor_us": weight_bytes / args.copy_gbs / 1e3, "runs": runs,
              "phase_us": profiles}
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
