"""The Thinker's per-layer decode kernels at 1-32 rows: the chains of the issue-6 profile against the fused ones.

Run on the GPU machine:
  PYTHONPATH=. python bench/kernels/bench_decode_layer.py --out decode_layer.json [--moe-config F]
MoE half, before: add+RMSNorm, router GEMM, top-k, grouping, gate_up, down, top-k sum (7 launches); after:
add+RMSNorm with the router logits, gate_up routing inside, down summing the top-k inside (3 launches); after
grouped: the router in the norm, then the grouped GEMMs (places SMALL_PATH_MAX_TOKENS and ROUTER_IN_NORM_MAX_TOKENS).
Attention half, before: q/k norm + rope, two index_copy into the cache, attention, split merge (5); after: norm +
rope storing k/v, attention, split merge (3). Block tables are as wide as the engine's graphs make them
(max_model_len), so the split count is the engine's too. Times are medians of CUDA-graph replays, MoE weights cycled
past L2 (every layer reads its own experts); `x48` is the step-level estimate. Also sweeps the keys per split.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import triton

from bench.kernels.bench_kernels import BF16, Cycle, copies_for, graph_ms
from runtime.attention.kv_cache import write_kv
from runtime.kernels.moe_config import moe_config
from runtime.kernels.moe_triton import fused_moe_triton, routed_moe_triton
from runtime.kernels.paged_attention_triton import paged_attention_triton
from runtime.kernels.rmsnorm_triton import (
    fused_add_rmsnorm_router_triton, fused_add_rmsnorm_triton, qk_norm_rope_cache_triton, qk_norm_rope_triton,
)

LAYERS = 48
EXPERTS, HIDDEN, INTER, TOP_K = 128, 2048, 768, 8
Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 4, 128, 16
MAX_MODEL_LEN = 32768
ROWS = [1, 2, 4, 8, 16, 32]
KV_LENS = [64, 300, 2048]


def bench_moe_layer(records: list[dict], config_path: Path | None) -> None:
    layer_bytes = 3 * EXPERTS * HIDDEN * INTER * 2
    layers = Cycle([
        ((torch.randn(EXPERTS, HIDDEN, device="cuda") / HIDDEN**0.5).to(BF16),
         (torch.randn(EXPERTS, 2 * INTER, HIDDEN, device="cuda") / HIDDEN**0.5).to(BF16),
         (torch.randn(EXPERTS, HIDDEN, INTER, device="cuda") / INTER**0.5).to(BF16))
        for _ in range(copies_for(layer_bytes, target=2 << 30, most=8))
    ])
    norm_w = (1 + 0.1 * torch.randn(HIDDEN, device="cuda")).to(BF16)
    for m in ROWS:
        x, res = (torch.randn(m, HIDDEN, device="cuda").to(BF16) for _ in range(2))
        cfg = moe_config(EXPERTS, HIDDEN, INTER, TOP_K, m, torch.cuda.get_device_name(), config_path)
        grouped = cfg._replace(small_max_tokens=0)

        def before() -> torch.Tensor:
            router, w_gate_up, w_down = layers.next()
            h = fused_add_rmsnorm_triton(x, res, norm_w).normed
            return fused_moe_triton(h, router, w_gate_up, w_down, TOP_K, True, None, grouped)

        def after(small: bool = True) -> torch.Tensor:
            router, w_gate_up, w_down = layers.next()
            h, _, logits = fused_add_rmsnorm_router_triton(x, res, norm_w, router)
            return routed_moe_triton(h, logits, w_gate_up, w_down, TOP_K, True, None,
                                     cfg._replace(small_max_tokens=m if small else 0))

        # after: the router in the norm and the small path at every row count; grouped: the router in the norm and
        # the grouped GEMMs (places SMALL_PATH_MAX_TOKENS and ROUTER_IN_NORM_MAX_TOKENS)
        records.append(finish({"part": "moe_layer", "rows": m, "before_ms": graph_ms(before),
                               "after_ms": graph_ms(after), "after_grouped_ms": graph_ms(lambda: after(False))}))


def attention_case(rows: int, kv_len: int) -> dict:
    """Static inputs of one layer's attention at `rows` decode rows over kv_len cached tokens each."""
    width = MAX_MODEL_LEN // BLOCK_SIZE
    need = triton.cdiv(kv_len, BLOCK_SIZE)
    blocks = torch.randperm(rows * need + 1, device="cuda").to(torch.int32)
    tables = torch.zeros(rows, width, dtype=torch.int32, device="cuda")
    tables[:, :need] = blocks[:rows * need].view(rows, need)
    slots = (tables[:, need - 1].long() * BLOCK_SIZE + (kv_len - 1) % BLOCK_SIZE)  # each row's newest token
    qkv = torch.randn(rows, (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM, device="cuda").to(BF16)
    q_end, k_end = Q_HEADS * HEAD_DIM, (Q_HEADS + KV_HEADS) * HEAD_DIM
    angles = torch.rand(rows, HEAD_DIM // 2, device="cuda") * 100
    return {
        "q": qkv[:, :q_end].view(rows, Q_HEADS, HEAD_DIM), "k": qkv[:, q_end:k_end].view(rows, KV_HEADS, HEAD_DIM),
        "v": qkv[:, k_end:].view(rows, KV_HEADS, HEAD_DIM),
        "qw": torch.ones(HEAD_DIM, dtype=BF16, device="cuda"), "kw": torch.ones(HEAD_DIM, dtype=BF16, device="cuda"),
        "cos": torch.cat([angles, angles], -1).cos(), "sin": torch.cat([angles, angles], -1).sin(),
        "cache": torch.randn(2, rows * need + 1, BLOCK_SIZE, KV_HEADS, HEAD_DIM, device="cuda").to(BF16),
        "slots": slots, "tables": tables, "kv_lens": torch.full((rows,), kv_len, dtype=torch.int32, device="cuda"),
        "cu": torch.arange(rows + 1, dtype=torch.int32, device="cuda"),
    }


def bench_attention_layer(records: list[dict], split_keys: list[int]) -> None:
    for rows in ROWS:
        for kv_len in KV_LENS:
            c = attention_case(rows, kv_len)
            attend = (c["cache"], c["tables"], c["kv_lens"], c["cu"], 1)

            def before() -> torch.Tensor:
                q, k = qk_norm_rope_triton(c["q"], c["k"], c["qw"], c["kw"], c["cos"], c["sin"])
                write_kv(c["cache"], k, c["v"], c["slots"])
                return paged_attention_triton(q, *attend)

            def after(min_split_keys: int = 64) -> torch.Tensor:
                q = qk_norm_rope_cache_triton(c["q"], c["k"], c["v"], c["qw"], c["kw"], c["cos"], c["sin"],
                                              c["cache"], c["slots"])
                return paged_attention_triton(q, *attend, min_split_keys=min_split_keys)

            rec = {"part": "attention_layer", "rows": rows, "kv_len": kv_len, "before_ms": graph_ms(before),
                   "after_ms": graph_ms(after)}
            for keys in split_keys:  # fewer, longer splits: the single-split case (no merge at all) comes sooner
                rec[f"after_min{keys}_ms"] = graph_ms(lambda: after(keys))
            records.append(finish(rec))


def finish(rec: dict) -> dict:
    rec["saved_us_x48"] = (rec["before_ms"] - rec["after_ms"]) * 1e3 * LAYERS
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()}), flush=True)
    return rec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--moe-config", type=Path, default=None, help="tuned JSON (default: the shipped one)")
    parser.add_argument("--split-keys", default="128,256,512", help="min_split_keys values to sweep (empty: none)")
    args = parser.parse_args()
    start = time.monotonic()
    records: list[dict] = []
    split_keys = [int(v) for v in args.split_keys.split(",") if v]
    for name, section in (("moe", lambda: bench_moe_layer(records, args.moe_config)),
                          ("attention", lambda: bench_attention_layer(records, split_keys))):
        try:
            section()
        except Exception as exc:  # noqa: BLE001  a failing half must not lose the other's numbers
            print(f"section {name} failed: {type(exc).__name__}: {exc}", flush=True)
            records.append({"part": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "timing": "median of CUDA-graph replays (do_bench_cudagraph)", "records": records,
           "wall_s": time.monotonic() - start}
    Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
