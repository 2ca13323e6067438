"""The MoE small path's down splits (runtime/kernels/moe_small_triton.py) at 1, 2 and 4 tokens: split counts by down
tile, beside the shipped tiles unsplit and the rule's pick; writes JSON.

Run on the GPU machine:  PYTHONPATH=. python bench/kernels/bench_moe_small_splits.py --out splits.json
A time is the whole small path (gate_up then down) inside a CUDA graph, median of replays (bench_kernels.graph_ms),
weights cycled through copies past L2 so every call streams its experts from HBM. Routing is balanced by
construction: logits drawn N(0, 1) per token and expert, so a batch's top-k is uniform; each record carries the
distinct experts read beside the uniform expectation (docs/benchmarks.md's routing rule). `hbm_ratio` is the touched
experts' bytes at the measured copy bandwidth over the time: 1.0 is the floor.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import torch

from bench.kernels.bench_kernels import BF16, Cycle, copies_for, copy_bandwidth, graph_ms
from bench.moe_routing import uniform_experts
from runtime.kernels.moe_config import GemmConfig, moe_config
from runtime.kernels.moe_small_triton import experts_small_triton, plan_down
from runtime.kernels.paged_attention_triton import num_sms

SHAPES = {"thinker": (128, 2048, 768, 8), "talker": (128, 1024, 384, 6)}
TOKENS = [1, 2, 4]
DOWN_TILES = [GemmConfig(16, 256, 4, 4), GemmConfig(16, 128, 4, 4), GemmConfig(32, 128, 4, 4)]
SPLITS = [1, 2, 3, 4, 6, 8, 12, 16]


def bench_shape(name: str, shape: tuple[int, int, int, int], bandwidth: float, records: list[dict]) -> None:
    experts, hidden, inter, top_k = shape
    layers = Cycle([((torch.randn(experts, 2 * inter, hidden, device="cuda") / hidden**0.5).to(BF16),
                     (torch.randn(experts, hidden, inter, device="cuda") / inter**0.5).to(BF16))
                    for _ in range(copies_for(3 * experts * hidden * inter * 2, target=2 << 30, most=8))])
    sms = num_sms(0)
    for tokens in TOKENS:
        x = torch.randn(tokens, hidden, device="cuda").to(BF16)
        logits = torch.randn(tokens, experts, device="cuda").to(BF16)
        touched = int(torch.unique(torch.topk(logits.float(), top_k, dim=-1).indices).numel())
        shipped = moe_config(experts, hidden, inter, top_k, tokens, torch.cuda.get_device_name())
        base = {"model": name, "tokens": tokens, "experts_touched": {"measured": touched,
                "uniform": round(uniform_experts(experts, top_k, tokens), 2)},
                "min_bytes": touched * 3 * hidden * inter * 2}

        def timed(down: GemmConfig, splits: int, sweep: str) -> None:
            ms = graph_ms(lambda: experts_small_triton(x, logits, *layers.next(), top_k, True, shipped.small_gate_up,
                                                       down, splits))
            rec = {**base, "sweep": sweep, "gate_up_tile": list(shipped.small_gate_up), "down_tile": list(down),
                   "splits": splits, "us": round(ms * 1e3, 2),
                   "hbm_ratio": round(base["min_bytes"] / bandwidth / (ms * 1e-3), 3)}
            records.append(rec)
            print(f"{name:8s} T={tokens} {sweep:7s} down {list(down)} x{splits}: {rec['us']:7.2f} us "
                  f"({rec['hbm_ratio']:.2f} of HBM)", flush=True)

        for down in dict.fromkeys([shipped.small_down, *DOWN_TILES]):
            timed(down, plan_down(tokens, hidden, inter, top_k, down, sms).splits, "rule")
            for splits in SPLITS:
                timed(down, splits, "sweep")


def best(records: list[dict]) -> dict:
    """Per model, token count and down tile: the rule's pick and the fastest split count."""
    out: dict = {}
    for rec in records:
        entry = out.setdefault(f"{rec['model']}.T{rec['tokens']}.down{rec['down_tile']}", {})
        key = "rule" if rec["sweep"] == "rule" else "best"
        if key == "rule" or "best" not in entry or rec["us"] < entry["best"]["us"]:
            entry[key] = {"splits": rec["splits"], "us": rec["us"], "hbm_ratio": rec["hbm_ratio"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args()
    start = time.time()
    bandwidth = copy_bandwidth()
    records: list[dict] = []
    for name in args.models:
        bench_shape(name, SHAPES[name], bandwidth, records)
        torch.cuda.empty_cache()  # the shape's weight copies are gone with its call
    commit = os.environ.get("OMNIMESH_COMMIT") or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                                 text=True).stdout.strip()
    Path(args.out).write_text(json.dumps({
        "device": torch.cuda.get_device_name(), "sms": num_sms(0), "copy_bandwidth_tb_s": round(bandwidth / 1e12, 3),
        "torch": torch.__version__, "commit": commit or None, "seconds": round(time.time() - start, 1),
        "command": "python bench/kernels/bench_moe_small_splits.py --out <file>",
        "best": best(records), "records": records}, indent=1))
    print(json.dumps(best(records), indent=1))


if __name__ == "__main__":
    main()
