"""Tunes the Triton fused MoE tiles for the Thinker's and Talker's expert shapes on this GPU; writes the config JSON.

Run on the GPU machine:  PYTHONPATH=. python bench/kernels/tune_moe.py --out runtime/kernels/configs/<file>.json
Per batch size it tries a few row blocks (BLOCK_M, shared by the grouping and both GEMMs), times each GEMM's
candidates alone (triton do_bench: median, L2 flushed between calls), keeps the fastest sum, and checks the chosen
config against the fp32 reference before writing it. Batch sizes the small path takes (moe_small_triton) also get
its two kernels' tiles, gate_up first, then down with the best gate_up; both timed together, as they always run.
`--batch-sizes 1 2 4 --update <shipped JSON>` retunes a few sizes and keeps the file's other entries.

Routing here is balanced by construction (the routing rule of docs/benchmarks.md): tokens and router are drawn i.i.d.,
so each token's top-k is an independent uniform draw and a batch reads the uniform expectation of experts, as a
trained router's batch does. The tiles it picks are the balanced case's; the engine run at balanced routing
(bench/results/2026-12-03-thinker-h200-balanced.json) reads experts at 4.8 TB/s with them at 32 rows.
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import triton
from triton.testing import do_bench

from runtime.kernels.moe_align import MoeAlignment, align_torch
from runtime.kernels.moe_config import (
    SMALL_DOWN, SMALL_GATE_UP, SMALL_PATH_MAX_TOKENS, GemmConfig, MoeConfig, config_to_json, default_config, shape_key,
)
from runtime.kernels.moe_gemm_triton import down_weighted, gate_up_silu
from runtime.kernels.moe_reference import Routing, experts_reference, topk_softmax_reference
from runtime.kernels.moe_small_triton import experts_small_triton
from runtime.kernels.moe_triton import experts_triton

BATCH_SIZES = [1, 4096, 64, 16, 256, 1024, 4, 2, 8, 32, 128, 512, 2048]  # spread first, in case time runs out
SMEM_LIMIT = 200 * 1024
DEVICE = "cuda"  # the dev dry run swaps in "cpu" (Triton interpreter)
DTYPE = torch.bfloat16


class Shape(NamedTuple):
    name: str
    experts: int
    hidden: int
    inter: int
    top_k: int


SHAPES = [Shape("thinker", 128, 2048, 768, 8), Shape("talker", 128, 1024, 384, 6)]


def block_m_choices(rows_per_expert: float) -> list[int]:
    if rows_per_expert < 4:
        return [16]
    if rows_per_expert < 16:
        return [16, 32]
    if rows_per_expert < 64:
        return [32, 64]
    if rows_per_expert < 256:
        return [64, 128]
    return [128, 64]


def gemm_candidates(block_m: int, num_b_tiles: int) -> list[GemmConfig]:
    """Tiles that fit shared memory and registers; num_b_tiles is 2 for gate_up (gate and up accumulators)."""
    grid = {
        16: [(bn, bk, 4, st) for bn in (16, 32, 64, 128) for bk in (128, 256) for st in (3, 4)]
        + [(32, 128, 4, 5), (64, 128, 4, 5), (32, 64, 4, 6), (64, 64, 4, 6), (64, 128, 8, 4), (128, 128, 8, 4)],
        32: [(bn, bk, 4, st) for bn in (32, 64, 128) for bk in (64, 128) for st in (3, 4)],
        64: [(bn, bk, w, 3) for bn in (64, 128) for bk in (64, 128) for w in (4, 8)]
        + [(64, 64, 4, 4), (128, 64, 8, 4)],
        128: [(bn, 64, 8, st) for bn in (64, 128, 256) for st in (3, 4)] + [(64, 64, 4, 3)],
    }[block_m]
    keep = []
    for bn, bk, warps, stages in grid:
        smem = stages * (block_m * bk + num_b_tiles * bk * bn) * 2
        acc_regs = num_b_tiles * block_m * bn / (warps * 32)
        if smem <= SMEM_LIMIT and acc_regs <= 128:
            keep.append(GemmConfig(bn, bk, warps, stages))
    return keep


def small_candidates(kind: str) -> list[GemmConfig]:
    """Small-path tiles (16 rows): gate_up wants enough N tiles to fill the GPU at 8 experts, down enough at one
    token's H outputs; smem per stage is (16 x bk + b_tiles x bk x bn) x 2 bytes."""
    if kind == "gate_up":
        grid = [(bn, bk, w, st) for bn in (16, 32, 64) for bk in (128, 256) for w in (4, 8) for st in (3, 4, 5)]
    else:
        grid = [(bn, bk, w, st) for bn in (16, 32) for bk in (128, 256, 512) for w in (2, 4, 8) for st in (3, 4, 5)]
    b_tiles = 2 if kind == "gate_up" else 1
    return [GemmConfig(*c) for c in grid if c[3] * (16 * c[1] + b_tiles * c[1] * c[0]) * 2 <= SMEM_LIMIT]


def tune_small(shape: Shape, m: int, tensors: dict, log: list[dict]) -> tuple[GemmConfig, GemmConfig, float]:
    """(gate_up tile, down tile, ms of both) for the small path at m tokens; the defaults where nothing ran."""
    x = torch.randn(m, shape.hidden, device=DEVICE).to(DTYPE)
    logits = x @ tensors["router"].T
    w_gate_up, w_down = tensors["w_gate_up"], tensors["w_down"]
    tag = f"{shape.name} M={m} small"

    def run(gate_up: GemmConfig, down: GemmConfig) -> torch.Tensor:
        return experts_small_triton(x, logits, w_gate_up, w_down, shape.top_k, True, gate_up, down)

    _, gate_up = best_of(small_candidates("gate_up"), lambda c: run(c, SMALL_DOWN), log, tag + " gate_up")
    gate_up = gate_up or SMALL_GATE_UP
    ms, down = best_of(small_candidates("down"), lambda c: run(gate_up, c), log, tag + " down")
    return gate_up, down or SMALL_DOWN, ms


def time_ms(fn: Callable[[], object]) -> float:
    return float(do_bench(fn, warmup=3, rep=10, return_mode="median"))


def best_of(candidates: list[GemmConfig], run: Callable[[GemmConfig], object], log: list[dict], tag: str) -> tuple:
    best = (float("inf"), None)
    for cfg in candidates:
        try:
            ms = time_ms(lambda: run(cfg))
        except Exception as err:  # a tile the compiler rejects (resources) is skipped, not fatal
            log.append({"tag": tag, "cfg": list(cfg), "error": f"{type(err).__name__}: {str(err)[:120]}"})
            continue
        log.append({"tag": tag, "cfg": list(cfg), "ms": ms})
        best = min(best, (ms, cfg), key=lambda t: t[0])
    return best


def tune_one(shape: Shape, m: int, tensors: dict, log: list[dict]) -> tuple[MoeConfig, float]:
    x = torch.randn(m, shape.hidden, device=DEVICE).to(DTYPE)
    routing = topk_softmax_reference(x @ tensors["router"].T, shape.top_k)
    w_gate_up, w_down = tensors["w_gate_up"], tensors["w_down"]
    best: tuple[float, MoeConfig | None] = (float("inf"), None)
    for block_m in block_m_choices(m * shape.top_k / shape.experts):
        grouping: MoeAlignment = align_torch(routing.topk_ids, shape.experts, block_m)
        tag = f"{shape.name} M={m} BM={block_m}"
        gu_ms, gu_cfg = best_of(gemm_candidates(block_m, 2),
                                lambda c: gate_up_silu(x, w_gate_up, grouping, shape.top_k, c), log, tag + " gate_up")
        if gu_cfg is None:
            continue
        act = gate_up_silu(x, w_gate_up, grouping, shape.top_k, gu_cfg)
        dn_ms, dn_cfg = best_of(gemm_candidates(block_m, 1),
                                lambda c: down_weighted(act, w_down, routing.topk_weights, grouping, c), log,
                                tag + " down")
        if dn_cfg is not None and gu_ms + dn_ms < best[0]:
            best = (gu_ms + dn_ms, MoeConfig(block_m, gu_cfg, dn_cfg))
    ms, cfg = best
    if cfg is None:
        return default_config(m, shape.experts, shape.top_k), float("nan")
    return cfg, ms


def verify(shape: Shape, m: int, cfg: MoeConfig, tensors: dict) -> float:
    """The larger rel error of the routed experts with this config (grouped path, and small path where it runs)
    against fp32 PyTorch."""
    x = torch.randn(m, shape.hidden, device=DEVICE).to(DTYPE)
    # distinct logits (a shuffled ladder 0.05 apart survives bf16): the small path routes itself, and a tie at the
    # k-th expert could be broken unlike torch.topk breaks it
    ladder = torch.argsort(torch.rand(m, shape.experts, device=DEVICE), dim=-1).float() * 0.05 - 3.0
    logits = ladder.to(DTYPE)
    routing = topk_softmax_reference(logits, shape.top_k)
    ref = experts_reference(x.float(), Routing(routing.topk_ids, routing.topk_weights.float()),
                            tensors["w_gate_up"].float(), tensors["w_down"].float())
    outs = [experts_triton(x, routing, tensors["w_gate_up"], tensors["w_down"], cfg)]
    if m <= cfg.small_max_tokens:
        outs.append(experts_small_triton(x, logits, tensors["w_gate_up"], tensors["w_down"], shape.top_k, True,
                                         cfg.small_gate_up, cfg.small_down))
    return max(float((out.double() - ref.double()).norm() / ref.double().norm()) for out in outs)


_WORKER_WEIGHTS: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def precompile_one(task: tuple[str, Shape, int, GemmConfig]) -> str:
    """Compile one candidate in a worker process by launching it once on uninitialised weights (values unused)."""
    kind, shape, block_m, cfg = task
    try:
        if shape.name not in _WORKER_WEIGHTS:
            _WORKER_WEIGHTS[shape.name] = (
                torch.empty(shape.experts, 2 * shape.inter, shape.hidden, device=DEVICE, dtype=DTYPE),
                torch.empty(shape.experts, shape.hidden, shape.inter, device=DEVICE, dtype=DTYPE),
            )
        w_gate_up, w_down = _WORKER_WEIGHTS[shape.name]
        ids = torch.arange(shape.top_k, device=DEVICE, dtype=torch.int32)[None, :]
        grouping = align_torch(ids, shape.experts, block_m)
        x = torch.zeros(1, shape.hidden, device=DEVICE, dtype=DTYPE)
        if kind.startswith("small"):  # block_m is unused: the small path's tile rows are the tokens
            logits = torch.zeros(1, shape.experts, device=DEVICE, dtype=DTYPE)
            tiles = (cfg, SMALL_DOWN) if kind == "small_gate_up" else (SMALL_GATE_UP, cfg)
            experts_small_triton(x, logits, w_gate_up, w_down, shape.top_k, True, *tiles)
        elif kind == "gate_up":
            gate_up_silu(x, w_gate_up, grouping, shape.top_k, cfg)
        else:
            act = torch.zeros(grouping.sorted_ids.numel(), shape.inter, device=DEVICE, dtype=DTYPE)
            down_weighted(act, w_down, torch.ones(1, shape.top_k, device=DEVICE, dtype=DTYPE), grouping, cfg)
        torch.cuda.synchronize()
        return "ok"
    except Exception as err:  # noqa: BLE001  rejected tiles are skipped later too
        return f"{kind} {block_m} {cfg}: {type(err).__name__}"


def precompile(workers: int, batch_sizes: list[int]) -> None:
    """Fill Triton's on-disk cache with every candidate these batch sizes try, in parallel: compiling is most of the
    tuning time."""
    block_ms = {bm for shape in SHAPES for m in batch_sizes for bm in block_m_choices(m * shape.top_k / shape.experts)}
    tasks = [(kind, shape, block_m, cfg) for shape in SHAPES for block_m in sorted(block_ms)
             for kind, tiles in (("gate_up", 2), ("down", 1)) for cfg in gemm_candidates(block_m, tiles)]
    if min(batch_sizes) <= SMALL_PATH_MAX_TOKENS:
        tasks += [(f"small_{kind}", shape, 16, cfg) for shape in SHAPES for kind in ("gate_up", "down")
                  for cfg in small_candidates(kind)]
    t0 = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        results = pool.map(precompile_one, tasks, chunksize=1)
    failed = [r for r in results if r != "ok"]
    print(f"precompiled {len(tasks)} candidates with {workers} workers in {time.monotonic() - t0:.0f} s; "
          f"{len(failed)} rejected: {failed[:6]}", flush=True)


def make_tensors(shape: Shape) -> dict:
    return {
        "router": torch.randn(shape.experts, shape.hidden, device=DEVICE).to(DTYPE),
        "w_gate_up": (torch.randn(shape.experts, 2 * shape.inter, shape.hidden, device=DEVICE)
                      / shape.hidden**0.5).to(DTYPE),
        "w_down": (torch.randn(shape.experts, shape.hidden, shape.inter, device=DEVICE) / shape.inter**0.5).to(DTYPE),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="config JSON to write")
    parser.add_argument("--log", default=None, help="per-candidate timings JSON")
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop tuning new batch sizes after this")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=BATCH_SIZES, help="tune only these")
    parser.add_argument("--update", type=Path, default=None,
                        help="a config JSON whose entries are kept where this run tunes nothing (e.g. the shipped one)")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="parallel compiles (0: none)")
    args = parser.parse_args()
    start = time.monotonic()
    if args.workers > 0:
        precompile(args.workers, args.batch_sizes)
    result: dict[str, dict[str, dict]] = json.loads(args.update.read_text())["shapes"] if args.update else {}
    log: list[dict] = []
    tensors = {shape.name: make_tensors(shape) for shape in SHAPES}
    for m in args.batch_sizes:
        for shape in SHAPES:
            if time.monotonic() - start > args.budget_s:
                print(f"budget spent: {shape.name} M={m} left untuned", flush=True)
                continue
            t0 = time.monotonic()
            try:
                cfg, ms = tune_one(shape, m, tensors[shape.name], log)
                small_ms = None
                if m <= SMALL_PATH_MAX_TOKENS:
                    gate_up, down, small_ms = tune_small(shape, m, tensors[shape.name], log)
                    cfg = cfg._replace(small_gate_up=gate_up, small_down=down)
                err = verify(shape, m, cfg, tensors[shape.name])
            except Exception as exc:  # noqa: BLE001  one bad batch size must not lose the rest
                print(f"{shape.name} M={m}: tuning failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            if not err < 2e-2:
                print(f"{shape.name} M={m}: tuned config failed verification (rel {err:.2e}); keeping default")
                cfg = default_config(m, shape.experts, shape.top_k)
            entry = config_to_json(cfg) | {"gemm_ms": ms if ms == ms else None, "rel_err": err}
            if small_ms is not None:  # the small path's two kernels, routing included, against gemm_ms's GEMMs
                entry["small_ms"] = small_ms
            result.setdefault(shape_key(shape.experts, shape.hidden, shape.inter, shape.top_k), {})[str(m)] = entry
            print(f"{shape.name:8s} M={m:5d} {cfg} gemms {ms * 1e3:8.1f} us rel {err:.1e} "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
            write(args, result, log)
    write(args, result, log)
    print(f"wrote {args.out} in {time.monotonic() - start:.0f} s")


def write(args: argparse.Namespace, result: dict[str, dict[str, dict]], log: list[dict]) -> None:
    """Write what is tuned so far (called after every batch size, so a crash or timeout keeps the results)."""
    shapes = {key: dict(sorted(b.items(), key=lambda kv: int(kv[0]))) for key, b in result.items()}
    doc = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "date": datetime.date.today().isoformat(), "command": "python bench/kernels/tune_moe.py",
        "shapes": shapes,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    if args.log:
        with open(args.log, "w") as f:
            json.dump(log, f)


if __name__ == "__main__":
    main()
