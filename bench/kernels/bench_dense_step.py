"""The persistent dense decoder step (runtime/kernels/dense_step.py) at the code predictor's dims: a frame's 15 steps
(the first two positions a row) as one CUDA graph, persistent (grid barriers between phases) against the same kernel
launched once per phase, over tilings; writes JSON.

Run on the GPU machine:  PYTHONPATH=. python bench/kernels/bench_dense_step.py --out dense.json [--rows 1 8 16]
A figure is the median over --repeats replays of the graph (CUDA events), divided by 15: microseconds a step. The
step reads 154 MB of layer weights and a 4 MB head: `floor_us` is that at the --copy-gbs bandwidth.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from runtime.kernels.dense_step import DenseStepBuffers, Tiling, default_tiling, dense_step
from tests.unit.kernels.test_kernel_dense_step_gpu import POSITIONS, frame_inputs, predictor_like

TILINGS = [Tiling(32, 16, 128, num_stages=3, prefetch=False), Tiling(32, 16, 128, num_stages=3),
           Tiling(32, 16, 128), Tiling(32, 16, 128, num_stages=4), Tiling(32, 16, 256, num_stages=3),
           Tiling(32, 16, 64, num_stages=4), Tiling(16, 16, 128, num_stages=3), Tiling(64, 16, 128, num_stages=3)]


def frame_us(stack, heads, cos, sin, rows: int, persistent: bool, tiling: Tiling, repeats: int) -> float:  # noqa: ANN001
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--copy-gbs", type=float, default=3000.0, help="the card's measured copy bandwidth, GB/s")
    parser.add_argument("--sweep", action="store_true", help="every tiling of TILINGS, not only the default")
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
    result = {"device": torch.cuda.get_device_name(), "command": " ".join(sys.argv),
              "weight_bytes_per_step": weight_bytes, "floor_us": weight_bytes / args.copy_gbs / 1e3, "runs": runs}
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
