"""Vision attention alone: our Triton kernel (each launch tile of a small sweep) vs torch's SDPA kernels; writes JSON.

    PYTHONPATH=. python bench/vision/bench_vision_attention.py --out bench/results/vision_attention_h200.json   # GPU
    PYTHONPATH=. python bench/vision/bench_vision_attention.py --tiny --out /tmp/va.json  # CPU, interpreter

Workloads at the released model's heads (16 of 72), bf16: the 60 s video (60 segments of 784 patches), 8 images at
448x448 (8 x 784) and 8 at 1280x720 (8 x 3,520). Inputs as the tower hands them over: q and k contiguous (the rotary
writes them), v a strided view of the packed qkv output. Backends: `triton` with each tile of `SWEEP_TILES`, the
tower's `segments-cudnn`, `segments-flash`, `segments-efficient` (one dense SDPA call per run of equal segments) and
`varlen` where it loads. Each sample times `--calls` back-to-back calls between CUDA events, queued behind a GPU
sleep so that host launch time never shows; medians over `--iters` samples after `--warmup` calls. TFLOP/s counts
4·H·D·Σ len² at the true head dim (padding is not work); rel_err is against float32 SDPA per segment. With --tiny
(CPU, Triton's interpreter, float32) the same code runs on toy shapes as a smoke test.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from runtime.kernels.vision_attention import attention_flops, vision_attention, vision_attention_reference
from services.vision.model import Grid, VisionTowerConfig
from services.vision.model.attention import select_attention
from services.vision.model.plan import VisionPlan, build_plan

REAL = VisionTowerConfig()  # 16 heads of 72
TINY = VisionTowerConfig(hidden_size=144, num_heads=2)  # head dim 72 still, so the tail tile runs
SDPA_BACKENDS = ("segments-cudnn", "segments-flash", "segments-efficient", "varlen")
DEPTH = 27  # attention calls per tower forward, for the per-forward projection
SLEEP_CYCLES = 5_000_000  # ~2.5 ms of GPU sleep: the host queues a sample's calls meanwhile


def workloads(tiny: bool) -> dict[str, tuple[Grid, ...]]:
    if tiny:
        return {"video_4x16": (Grid(4, 4, 4),), "images_24_12": (Grid(1, 4, 6), Grid(1, 2, 6))}
    return {
        "video_60s_2fps_448x448": (Grid(60, 28, 28),),  # 60 x 784
        "images_448x448_x8": (Grid(1, 28, 28),) * 8,  # 8 x 784
        "images_1280x720_x8": (Grid(1, 44, 80),) * 8,  # 8 x 3,520 (smart_resize: 704 x 1280)
    }


def timed(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int, calls: int) -> dict[str, float]:
    """Median / min milliseconds per call of `fn`: CUDA events on the GPU, wall clock elsewhere."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda._sleep(SLEEP_CYCLES)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / calls)
        else:
            begin = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - begin) * 1e3 / calls)
    return {"median_ms": statistics.median(samples), "min_ms": min(samples)}


def measure(fn: Callable[[], torch.Tensor], want: torch.Tensor, flop: int, device: torch.device,
            args: argparse.Namespace) -> dict[str, Any]:
    """Timing, TFLOP/s and error of one backend; a backend that refuses these shapes is recorded, not fatal."""
    try:
        err = float((fn().double() - want.double()).norm() / want.double().norm())
        timing = timed(fn, device, args.warmup, args.iters, args.calls)
    except (RuntimeError, ValueError) as exc:
        return {"error": str(exc).splitlines()[0][:300]}
    return {**timing, "tflop_s": flop / (timing["median_ms"] * 1e9), "rel_err": err}


def bench_workload(grids: tuple[Grid, ...], cfg: VisionTowerConfig, device: torch.device, dtype: torch.dtype,
                   args: argparse.Namespace) -> dict[str, Any]:
    from runtime.kernels.vision_attention_triton import SWEEP_TILES

    plan: VisionPlan = build_plan(grids, cfg.spatial_merge_size, cfg.position_grid_side).to(device)
    lengths = [g.h * g.w for g in grids for _ in range(g.t)]
    gen = torch.Generator(device=device).manual_seed(0)
    qkv = torch.randn(plan.num_patches, 3, cfg.num_heads, cfg.head_dim, device=device, generator=gen).to(dtype)
    q, k, v = qkv[:, 0].contiguous(), qkv[:, 1].contiguous(), qkv[:, 2]
    want = vision_attention_reference(q, k, v, plan.cu_seqlens)
    flop = attention_flops(lengths, cfg.num_heads, cfg.head_dim)
    row: dict[str, Any] = {"segments": len(lengths), "max_seqlen": plan.max_seqlen, "tokens": plan.num_patches,
                           "gflop": flop / 1e9, "triton": {}, "sdpa": {}}
    with torch.inference_mode():
        for tile in SWEEP_TILES:
            name = "m{}_n{}_w{}_s{}".format(*tile)
            fn = lambda tile=tile: vision_attention(q, k, v, plan.cu_seqlens, plan.max_seqlen, tile)  # noqa: E731
            row["triton"][name] = {"tile": tile._asdict(), **measure(fn, want, flop, device, args)}
        for name in SDPA_BACKENDS if device.type == "cuda" else ():
            try:
                attend = select_attention(name, device, dtype)[1]
            except (RuntimeError, ValueError) as exc:  # varlen without a kernel to load
                row["sdpa"][name] = {"error": str(exc).splitlines()[0][:300]}
                continue
            row["sdpa"][name] = measure(lambda attend=attend: attend(q, k, v, plan), want, flop, device, args)
    summarize(row)
    return row


def summarize(row: dict[str, Any]) -> None:
    """The fastest tile, and what it saves against cuDNN per call and per 27-block forward."""
    timed_tiles = {name: r for name, r in row["triton"].items() if "median_ms" in r}
    if not timed_tiles:
        return
    best = min(timed_tiles, key=lambda name: timed_tiles[name]["median_ms"])
    row["best_tile"] = best
    cudnn = row["sdpa"].get("segments-cudnn", {})
    if "median_ms" in cudnn:
        ours = timed_tiles[best]["median_ms"]
        row["cudnn_over_best"] = cudnn["median_ms"] / ours
        row["saving_per_forward_ms"] = (cudnn["median_ms"] - ours) * DEPTH


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the JSON result is written")
    parser.add_argument("--tiny", action="store_true",
                        help="toy shapes in float32 on the CPU in Triton's interpreter: a smoke test")
    parser.add_argument("--device", default=None, help="default: cuda (cpu with --tiny)")
    parser.add_argument("--warmup", type=int, default=None, help="calls before timing; default 10 (1 with --tiny)")
    parser.add_argument("--iters", type=int, default=None, help="timed samples; default 30 (1 with --tiny)")
    parser.add_argument("--calls", type=int, default=None, help="calls per sample; default 20 (1 with --tiny)")
    args = parser.parse_args(argv)
    args.device = args.device or ("cpu" if args.tiny else "cuda")
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 10)
    args.iters = args.iters if args.iters is not None else (1 if args.tiny else 30)
    args.calls = args.calls if args.calls is not None else (1 if args.tiny else 20)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.float32 if args.tiny else torch.bfloat16
    cfg = TINY if args.tiny else REAL
    if args.tiny:  # sets TRITON_INTERPRET before triton is imported, and lets the interpreter run on NumPy >= 2.4
        from tests.unit.kernels.interpreter_check import patch_numpy_scalars

        patch_numpy_scalars()
    import triton

    result: dict[str, Any] = {
        "benchmark": "vision_attention",
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "num_heads": cfg.num_heads,
        "head_dim": cfg.head_dim,
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "warmup": args.warmup,
        "iters": args.iters,
        "calls": args.calls,
        "workloads": {},
    }
    for name, grids in workloads(args.tiny).items():
        row = bench_workload(grids, cfg, device, dtype, args)
        result["workloads"][name] = row
        print(f"{name}: {json.dumps(row)}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
