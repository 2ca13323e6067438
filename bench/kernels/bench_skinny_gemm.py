"""Skinny GEMM (runtime/kernels/skinny_gemm.py) against cuBLAS at the decode linears' shapes, 1-16 rows; writes JSON.

Run on the GPU machine:  PYTHONPATH=. python bench/kernels/bench_skinny_gemm.py --out skinny.json [--sweep]
A time is one call's share of a CUDA graph of --calls back-to-back calls (CUDA events around each replay, median
of --repeats), so launch gaps are like those in the engine's graphed steps. The calls cycle through copies of the
weight that together outgrow L2, so each streams its weight from HBM as a model's next layer does. GB/s counts the
weight, x and the output once. Baselines: F.linear; F.linear on rows padded to 8 (what the talker frame ran under 8
rows before the skinny GEMM: a copy into an 8-row buffer first; M < 8 only); with the fused SwiGLU, F.linear then
silu_mul.
--sweep times a grid of tilings at a few shapes and row counts, next to the default rule's pick.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
import triton

from runtime.kernels.activation import silu_mul
from runtime.kernels.paged_attention_triton import num_sms
from runtime.kernels.skinny_gemm import Epilogue, SkinnyConfig, skinny_config, skinny_linear, split_plan

BF16 = torch.bfloat16
DEVICE = "cuda"  # a dev dry run of the harness swaps in "cpu" (and a stand-in for graph_us)
ROWS = [1, 2, 4, 8, 16]
PAD_ROWS = 8  # the padded baseline's rows
WEIGHT_BYTES_TARGET = 256 << 20  # weight copies per shape: together well past the H200's L2


class Shape(NamedTuple):
    name: str
    weight_rows: int
    k: int
    epilogue: Epilogue | None = None


def decode_shapes() -> list[Shape]:
    """The linears of one decode step at the released dims (bench/thinker/random_model.py, bench/talker/bench_talker.py
    and bench/asr/checkpoint.py `real_config`; the fused weights of services/talker/model/fused.py and the Thinker's
    fused q/k/v), head_dim 128 everywhere."""
    hd = 128
    pred_q, pred_kv, pred_inter, codebook = 16 * hd, 8 * hd, 3072, 2048  # code predictor, hidden 1024
    talk_q, talk_kv, shared, vocab = 16 * hd, 2 * hd, 768, 3072  # talker, hidden 1024
    shared_rows = 2 * shared + 1 + (-(2 * shared + 1) % 8)  # [gate_proj; up_proj; gate; zero rows to 8]
    think_q, think_kv = 32 * hd, 4 * hd  # thinker, hidden 2048
    asr_q, asr_kv, asr_inter = 16 * hd, 8 * hd, 6144  # Qwen3-ASR-1.7B's dense decoder, hidden 2048
    return [
        Shape("predictor.qkv", pred_q + 2 * pred_kv, 1024), Shape("predictor.o", 1024, pred_q),
        Shape("predictor.gate_up", 2 * pred_inter, 1024),
        Shape("predictor.gate_up+silu", 2 * pred_inter, 1024, Epilogue.SILU_MUL),
        Shape("predictor.down", 1024, pred_inter), Shape("predictor.lm_head", codebook, 1024),
        Shape("talker.qkv", talk_q + 2 * talk_kv, 1024), Shape("talker.o", 1024, talk_q),
        Shape("talker.shared_gate_up_gate", shared_rows, 1024),
        Shape("talker.shared_gate_up+silu", 2 * shared, 1024, Epilogue.SILU_MUL),
        Shape("talker.shared_down", 1024, shared), Shape("talker.codec_head", vocab, 1024),
        Shape("thinker.q", think_q, 2048), Shape("thinker.k", think_kv, 2048),
        Shape("thinker.qkv", think_q + 2 * think_kv, 2048), Shape("thinker.o", 2048, think_q),
        Shape("asr.qkv", asr_q + 2 * asr_kv, 2048), Shape("asr.o", 2048, asr_q),
        Shape("asr.gate_up+silu", 2 * asr_inter, 2048, Epilogue.SILU_MUL), Shape("asr.down", 2048, asr_inter),
    ]


def graph_us(calls: list[Callable[[], object]], repeats: int) -> float:
    """One call's share, in us, of a CUDA graph that runs `calls` back to back: the median over `repeats` replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:  # warm-up off the capture: compiles, cuBLAS workspaces, the split-K counters
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return statistics.median(times) * 1e3 / len(calls)


class Case:
    """One shape's weight copies (cycled by the graph's calls) and the bytes a call must move at `rows` rows."""

    def __init__(self, shape: Shape, calls: int) -> None:
        self.shape = shape
        nbytes = shape.weight_rows * shape.k * 2
        copies = max(1, min(calls, math.ceil(WEIGHT_BYTES_TARGET / nbytes)))
        self.weights = [(torch.randn(shape.weight_rows, shape.k, device=DEVICE) / shape.k**0.5).to(BF16)
                        for _ in range(copies)]
        self.out_cols = shape.weight_rows // 2 if shape.epilogue is Epilogue.SILU_MUL else shape.weight_rows

    def min_bytes(self, rows: int) -> int:
        return 2 * (self.shape.weight_rows * self.shape.k + rows * self.shape.k + rows * self.out_cols)

    def calls(self, fn: Callable[[torch.Tensor], object], count: int) -> list[Callable[[], object]]:
        return [lambda w=self.weights[i % len(self.weights)]: fn(w) for i in range(count)]


def padded(x: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """F.linear on x copied into a persistent 8-row buffer first (the padded baseline)."""
    buffer = x.new_zeros(PAD_ROWS, x.shape[1])

    def linear(w: torch.Tensor) -> torch.Tensor:
        buffer[:x.shape[0]].copy_(x)
        return F.linear(buffer, w)[:x.shape[0]]

    return linear


def bench_case(case: Case, rows: int, args: argparse.Namespace) -> dict:
    shape = case.shape
    x = torch.randn(rows, shape.k, device=DEVICE).to(BF16)
    cfg = skinny_config(case.out_cols, shape.weight_rows, shape.k, num_sms(torch.cuda.current_device()))
    rec = {"shape": shape.name, "M": rows, "N": shape.weight_rows, "K": shape.k, "out_cols": case.out_cols,
           "epilogue": shape.epilogue.name if shape.epilogue else None, "config": list(cfg),
           "splits": split_plan(shape.k, cfg.block_k, cfg.split_k).splits, "min_bytes": case.min_bytes(rows),
           "weight_copies": len(case.weights)}
    then = silu_mul if shape.epilogue is Epilogue.SILU_MUL else (lambda y: y)
    variants = {"ours": lambda w: skinny_linear(x, w, shape.epilogue),
                "f_linear": lambda w: then(F.linear(x, w))}
    if rows < PAD_ROWS:
        pad = padded(x)
        variants["padded8"] = lambda w: then(pad(w))
    for name, fn in variants.items():
        us = graph_us(case.calls(fn, args.calls), args.repeats)
        rec[f"{name}_us"] = us
        rec[f"{name}_GBps"] = rec["min_bytes"] / (us * 1e-6) / 1e9
    rec["speedup_vs_f_linear"] = rec["f_linear_us"] / rec["ours_us"]
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.items()}), flush=True)
    return rec


def sweep_configs(args: argparse.Namespace) -> list[SkinnyConfig]:
    grid = itertools.product(*(map(int, v.split(",")) for v in (
        args.sweep_block_n, args.sweep_block_k, args.sweep_split, args.sweep_warps, args.sweep_stages)))
    return [SkinnyConfig(*values) for values in grid]


def sweep_case(case: Case, rows: int, configs: list[SkinnyConfig], args: argparse.Namespace) -> dict:
    """Every swept tiling (the same K plan counted once), fastest first; failures (shared memory) recorded."""
    shape = case.shape
    x = torch.randn(rows, shape.k, device=DEVICE).to(BF16)
    default = skinny_config(case.out_cols, shape.weight_rows, shape.k, num_sms(torch.cuda.current_device()))
    results, seen = [], set()
    for cfg in [default, *configs]:
        plan = split_plan(shape.k, cfg.block_k, cfg.split_k)
        key = cfg._replace(split_k=plan.splits)
        if key in seen:
            continue
        seen.add(key)
        try:
            us = graph_us(case.calls(lambda w, c=cfg: skinny_linear(x, w, shape.epilogue, config=c), args.calls),
                          args.sweep_repeats)
            results.append({"config": list(key), "us": us, "default": cfg is default})
        except Exception as exc:  # noqa: BLE001  a tiling past the shared memory must not end the sweep
            results.append({"config": list(key), "error": f"{type(exc).__name__}: {str(exc)[:120]}"})
    timed = sorted((r for r in results if "us" in r), key=lambda r: r["us"])
    best = timed[0] if timed else {"us": math.nan}
    default_us = next((r["us"] for r in timed if r["default"]), math.nan)
    rec = {"shape": shape.name, "M": rows, "best": best, "default_us": default_us,
           "default_over_best": default_us / best["us"], "results": timed + [r for r in results if "error" in r]}
    print(json.dumps({k: rec[k] for k in ("shape", "M", "best", "default_us", "default_over_best")}), flush=True)
    return rec


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rows", default=",".join(map(str, ROWS)))
    parser.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    parser.add_argument("--calls", type=int, default=50, help="calls per CUDA graph")
    parser.add_argument("--repeats", type=int, default=30, help="graph replays timed")
    parser.add_argument("--sweep", action="store_true", help="also time a grid of tilings")
    parser.add_argument("--sweep-shapes", default="predictor.o,predictor.gate_up+silu,predictor.qkv,"
                        "talker.shared_down,thinker.k,thinker.qkv")
    parser.add_argument("--sweep-rows", default="1,8")
    parser.add_argument("--sweep-block-n", default="16,32,64")
    parser.add_argument("--sweep-block-k", default="128,256")
    parser.add_argument("--sweep-split", default="1,2,4,8")
    parser.add_argument("--sweep-warps", default="4")
    parser.add_argument("--sweep-stages", default="3,4")
    parser.add_argument("--sweep-repeats", type=int, default=10)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    start = time.monotonic()
    wanted = set(filter(None, args.shapes.split(",")))
    shapes = [s for s in decode_shapes() if not wanted or s.name in wanted]
    sweep_shapes = set(args.sweep_shapes.split(",")) if args.sweep else set()
    sweep_rows = [int(r) for r in args.sweep_rows.split(",")]
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    doc = {"benchmark": "skinny_gemm", "device": torch.cuda.get_device_name(), "nvidia_smi": smi,
           "command": " ".join([Path(sys.executable).name, *sys.argv]), "torch": torch.__version__,
           "triton": triton.__version__, "sms": num_sms(torch.cuda.current_device()),
           "timing": f"CUDA events around replays of a CUDA graph of {args.calls} back-to-back calls (weights "
                     f"cycled past L2), median of {args.repeats}, divided by {args.calls}",
           "records": [], "sweep": []}
    for shape in shapes:
        case = Case(shape, args.calls)
        for rows in map(int, args.rows.split(",")):
            doc["records"].append(bench_case(case, rows, args))
        if shape.name in sweep_shapes:
            for rows in sweep_rows:
                doc["sweep"].append(sweep_case(case, rows, sweep_configs(args), args))
        del case
        torch.cuda.empty_cache()
        doc["wall_s"] = time.monotonic() - start
        args.out.write_text(json.dumps(doc, indent=1))
    print_table(doc["records"])


def print_table(records: list[dict]) -> None:
    print(f"{'shape':30s} {'M':>3s} {'ours us':>8s} {'cuBLAS':>8s} {'pad8':>8s} {'x':>6s} {'ours GB/s':>10s} config")
    for r in records:
        pad = f"{r['padded8_us']:8.2f}" if "padded8_us" in r else " " * 8
        print(f"{r['shape']:30s} {r['M']:3d} {r['ours_us']:8.2f} {r['f_linear_us']:8.2f} {pad} "
              f"{r['speedup_vs_f_linear']:6.2f} {r['ours_GBps']:10.0f} {r['config']}")


if __name__ == "__main__":
    main()
