"""Benchmarks our Triton kernels against plain-PyTorch GPU baselines at the Thinker/Talker shapes; writes JSON.

Run on the GPU machine:  PYTHONPATH=. python bench/kernels/bench_kernels.py --out results.json [--moe-config F]
Times are medians of CUDA-graph replays (triton do_bench_cudagraph), so launch gaps count as they would in the
engine's graphed decode step. Bytes are the fewest a kernel must move (touched expert weights, KV read once);
`hbm_ratio` is that over the measured copy bandwidth, divided by the time: 1.0 would be the HBM floor.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench, do_bench_cudagraph

from runtime.kernels.moe_align import align_torch
from runtime.kernels.moe_align_triton import align_triton
from runtime.kernels.moe_config import SMALL_PATH_MAX_TOKENS, moe_config
from runtime.kernels.moe_reference import experts_reference, topk_softmax_reference
from runtime.kernels.moe_triton import fused_moe_triton
from runtime.kernels.paged_attention_reference import gathered_sdpa_decode
from runtime.kernels.paged_attention_triton import paged_attention_triton
from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference, qk_norm_rope_reference
from runtime.kernels.rmsnorm_triton import fused_add_rmsnorm_triton, qk_norm_rope_triton

BF16 = torch.bfloat16
DEVICE = "cuda"  # the dev dry run swaps in "cpu" (Triton interpreter)
MOE_SHAPES = {"thinker": (128, 2048, 768, 8), "talker": (128, 1024, 384, 6)}
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
DECODE_CASES = [(batch, kv_len) for batch in (1, 8, 32, 128) for kv_len in (512, 4096)]
PREFILL_CASES = [(1, 2048), (4, 1024), (1, 8192)]  # (sequences, tokens each)
NORM_TOKENS = [1, 64, 4096]


def graph_ms(fn: Callable[[], object]) -> float:
    """Median ms of one call replayed in a CUDA graph; eager (events) if the call cannot be captured."""
    fn()
    torch.cuda.synchronize()
    try:
        return float(do_bench_cudagraph(fn, rep=20, return_mode="median"))
    except Exception:  # a baseline with a host sync cannot be captured: time it eagerly
        torch.cuda.synchronize()
        return float(do_bench(fn, warmup=5, rep=20, return_mode="median"))


def copy_bandwidth() -> float:
    """Device-to-device copy of 2 GiB, bytes read + written per second."""
    src = torch.empty(1 << 30, dtype=BF16, device=DEVICE).normal_()
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=10, rep=50, return_mode="median")
    return 2 * src.numel() * 2 / (ms * 1e-3)


def grouped_mm_moe(x: torch.Tensor, router: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
                   top_k: int) -> torch.Tensor:
    """The plain-PyTorch GPU MoE (what transformers' grouped_mm path does): sort, grouped_mm twice, scatter."""
    num_tokens, hidden = x.shape
    num_experts = w_gate_up.shape[0]
    routing = topk_softmax_reference(F.linear(x, router), top_k)
    flat = routing.topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.histc(flat.float(), bins=num_experts, min=0, max=num_experts - 1)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    rows = x[order // top_k]  # [T*k, H] grouped by expert
    gate, up = F.grouped_mm(rows, w_gate_up.transpose(1, 2), offs=offs).chunk(2, dim=-1)
    out = F.grouped_mm(F.silu(gate) * up, w_down.transpose(1, 2), offs=offs)  # [T*k, H]
    out = out * routing.topk_weights.reshape(-1)[order, None]
    pairs = torch.empty_like(out)
    pairs[order] = out
    return pairs.view(num_tokens, top_k, hidden).sum(dim=1)


class Cycle:
    """Hands out its items in turn, so repeated (and graph-captured) calls read different copies: with the copies
    together larger than the 60 MB L2, every call reads from HBM as a real step's new layer does."""

    def __init__(self, items: list) -> None:
        self.items, self.i = items, -1

    def next(self):  # noqa: ANN201
        self.i = (self.i + 1) % len(self.items)
        return self.items[self.i]


def copies_for(nbytes: int, target: int = 256 << 20, most: int = 256) -> int:
    return max(1, min(most, math.ceil(target / max(nbytes, 1))))


def bench_moe(bandwidth: float, config_path: Path | None, records: list[dict], loop_max_m: int) -> None:
    for name, (experts, hidden, inter, top_k) in MOE_SHAPES.items():
        layer_bytes = 3 * experts * hidden * inter * 2
        layers = Cycle([
            ((torch.randn(experts, hidden, device=DEVICE) / hidden**0.5).to(BF16),
             (torch.randn(experts, 2 * inter, hidden, device=DEVICE) / hidden**0.5).to(BF16),
             (torch.randn(experts, hidden, inter, device=DEVICE) / inter**0.5).to(BF16))
            for _ in range(copies_for(layer_bytes, target=2 << 30, most=8))
        ])
        expert_bytes = 3 * hidden * inter * 2
        for m in BATCH_SIZES:
            x = torch.randn(m, hidden, device=DEVICE).to(BF16)
            router0, w_gate_up0, w_down0 = layers.items[0]
            routing = topk_softmax_reference(x @ router0.T, top_k)
            touched = int(torch.unique(routing.topk_ids).numel())
            min_bytes = touched * expert_bytes + experts * hidden * 2 + 2 * m * hidden * 2
            cfg = moe_config(experts, hidden, inter, top_k, m, torch.cuda.get_device_name(), config_path)
            rec = {"kernel": "fused_moe", "model": name, "M": m, "experts_touched": touched, "min_bytes": min_bytes,
                   "weight_copies": len(layers.items),
                   "config": [cfg.block_m, list(cfg.gate_up), list(cfg.down)]}
            rec["triton_ms"] = graph_ms(lambda: fused_moe_triton(x, *layers.next(), top_k, config=cfg))
            if m <= 4 * SMALL_PATH_MAX_TOKENS:  # both paths around the switch, to place SMALL_PATH_MAX_TOKENS
                small, grouped = cfg._replace(small_max_tokens=m), cfg._replace(small_max_tokens=0)
                rec["small_path_ms"] = graph_ms(lambda: fused_moe_triton(x, *layers.next(), top_k, config=small))
                rec["grouped_path_ms"] = graph_ms(lambda: fused_moe_triton(x, *layers.next(), top_k, config=grouped))
            try:
                rec["grouped_mm_ms"] = graph_ms(lambda: grouped_mm_moe(x, *layers.next(), top_k))
            except Exception as err:  # noqa: BLE001
                rec["grouped_mm_error"] = f"{type(err).__name__}: {str(err)[:100]}"
            if m <= loop_max_m:
                rec["loop_ms"] = float(do_bench(lambda: experts_reference(x, routing, w_gate_up0, w_down0),
                                                warmup=5, rep=20, return_mode="median"))
            finish(rec, bandwidth)
            records.append(rec)
        del layers
        torch.cuda.empty_cache()


def bench_align(records: list[dict]) -> None:
    """The expert grouping alone (Triton, plain torch) at the thinker's routing, by token count."""
    experts, hidden, inter, top_k = MOE_SHAPES["thinker"]
    for m in (1, 8, 16, 32, 64, 256, 4096):
        routing = topk_softmax_reference(torch.randn(m, experts, device=DEVICE), top_k)
        block_m = moe_config(experts, hidden, inter, top_k, m, torch.cuda.get_device_name()).block_m
        rec = {"kernel": "moe_align", "M": m, "pairs": m * top_k, "block_m": block_m}
        for name, align in (("triton", align_triton), ("torch", align_torch)):
            rec[f"{name}_ms"] = graph_ms(lambda: align(routing.topk_ids, experts, block_m))
        print(json.dumps(rec), flush=True)
        records.append(rec)


def bench_decode_attention(bandwidth: float, records: list[dict]) -> None:
    q_heads, kv_heads, head_dim, block_size = 32, 4, 128, 16
    for batch, kv_len in DECODE_CASES:
        kv_bytes = 2 * batch * kv_len * kv_heads * head_dim * 2
        copies = copies_for(kv_bytes)
        blocks = batch * kv_len // block_size
        kv = torch.randn(2, copies * blocks, block_size, kv_heads, head_dim, device=DEVICE).to(BF16)
        perm = torch.randperm(copies * blocks, device=DEVICE).to(torch.int32)
        tables = Cycle([perm[i * blocks:(i + 1) * blocks].view(batch, -1) for i in range(copies)])
        kv_lens = torch.full((batch,), kv_len, dtype=torch.int32, device=DEVICE)
        cu = torch.arange(batch + 1, dtype=torch.int32, device=DEVICE)
        q = torch.randn(batch, q_heads, head_dim, device=DEVICE).to(BF16)
        rec = {"kernel": "paged_decode_attention", "B": batch, "kv_len": kv_len, "block_size": block_size,
               "min_bytes": kv_bytes, "kv_copies": copies}
        rec["triton_ms"] = graph_ms(lambda: paged_attention_triton(q, kv, tables.next(), kv_lens, cu, 1))
        rec["gathered_sdpa_ms"] = graph_ms(lambda: gathered_sdpa_decode(q, kv, tables.next(), kv_lens))
        finish(rec, bandwidth)
        records.append(rec)
        del kv


def bench_prefill_attention(records: list[dict]) -> None:
    q_heads, kv_heads, head_dim, block_size = 32, 4, 128, 16
    for seqs, length in PREFILL_CASES:
        blocks = seqs * length // block_size
        kv = torch.randn(2, blocks, block_size, kv_heads, head_dim, device=DEVICE).to(BF16)
        tables = torch.arange(blocks, device=DEVICE).view(seqs, -1).to(torch.int32)
        kv_lens = torch.full((seqs,), length, dtype=torch.int32, device=DEVICE)
        cu = torch.arange(0, seqs * length + 1, length, dtype=torch.int32, device=DEVICE)
        q = torch.randn(seqs * length, q_heads, head_dim, device=DEVICE).to(BF16)
        dense_q = q.view(seqs, length, q_heads, head_dim).transpose(1, 2)
        dense_kv = kv.view(2, seqs, length, kv_heads, head_dim).transpose(2, 3)
        flops = 4 * seqs * length * length * q_heads * head_dim / 2  # causal: half the square
        rec = {"kernel": "paged_prefill_attention", "seqs": seqs, "len": length, "flops": flops}
        rec["triton_ms"] = graph_ms(lambda: paged_attention_triton(q, kv, tables, kv_lens, cu, length))
        rec["sdpa_dense_ms"] = graph_ms(lambda: F.scaled_dot_product_attention(
            dense_q, dense_kv[0], dense_kv[1], is_causal=True, enable_gqa=True))
        rec["triton_tflops"] = flops / (rec["triton_ms"] * 1e-3) / 1e12
        rec["sdpa_tflops"] = flops / (rec["sdpa_dense_ms"] * 1e-3) / 1e12
        records.append(rec)


def bench_norms(bandwidth: float, records: list[dict]) -> None:
    for tokens in NORM_TOKENS:
        x, res = (torch.randn(tokens, 2048, device=DEVICE).to(BF16) for _ in range(2))
        w = torch.randn(2048, device=DEVICE).to(BF16)
        rec = {"kernel": "fused_add_rmsnorm", "T": tokens, "H": 2048, "min_bytes": 4 * tokens * 2048 * 2}
        rec["triton_ms"] = graph_ms(lambda: fused_add_rmsnorm_triton(x, res, w))
        rec["torch_ms"] = graph_ms(lambda: add_rmsnorm_reference(x, res, w))
        finish(rec, bandwidth)
        records.append(rec)
        qkv = torch.randn(tokens, 40 * 128, device=DEVICE).to(BF16)
        q, k = qkv[:, :4096].view(tokens, 32, 128), qkv[:, 4096:4608].view(tokens, 4, 128)
        cos, sin = torch.randn(tokens, 128, device=DEVICE), torch.randn(tokens, 128, device=DEVICE)
        rec = {"kernel": "qk_norm_rope", "T": tokens, "min_bytes": 2 * tokens * 36 * 128 * 2 + 2 * tokens * 128 * 4}
        rec["triton_ms"] = graph_ms(lambda: qk_norm_rope_triton(q, k, w[:128], w[:128], cos, sin))
        rec["torch_ms"] = graph_ms(lambda: qk_norm_rope_reference(q, k, w[:128], w[:128], cos, sin))
        finish(rec, bandwidth)
        records.append(rec)


def finish(rec: dict, bandwidth: float) -> None:
    if "min_bytes" in rec:
        floor_ms = rec["min_bytes"] / bandwidth * 1e3
        rec["floor_ms"] = floor_ms
        rec["triton_GBps"] = rec["min_bytes"] / (rec["triton_ms"] * 1e-3) / 1e9
        rec["hbm_ratio"] = floor_ms / rec["triton_ms"]
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--moe-config", type=Path, default=None, help="tuned JSON (default: the shipped one)")
    parser.add_argument("--loop-max-m", type=int, default=256, help="time the per-expert loop up to this M")
    parser.add_argument("--only", default="moe,align,decode,prefill,norm")
    args = parser.parse_args()
    start = time.monotonic()
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    records: list[dict] = []
    sections = {
        "moe": lambda: bench_moe(bandwidth, args.moe_config, records, args.loop_max_m),
        "align": lambda: bench_align(records),
        "decode": lambda: bench_decode_attention(bandwidth, records),
        "prefill": lambda: bench_prefill_attention(records),
        "norm": lambda: bench_norms(bandwidth, records),
    }
    for name in args.only.split(","):
        try:
            sections[name]()
        except Exception as exc:  # noqa: BLE001  a failing section must not lose the others' numbers
            print(f"section {name} failed: {type(exc).__name__}: {exc}", flush=True)
            records.append({"kernel": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        write(args.out, bandwidth, records, start)
    print_table(records)


def write(out: str, bandwidth: float, records: list[dict], start: float) -> None:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip() if DEVICE == "cuda" else ""
    doc = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE, "nvidia_smi": smi,
           "torch": torch.__version__, "triton": triton.__version__, "copy_bandwidth_Bps": bandwidth,
           "hbm_datasheet_floor_Bps": 4.2e12,
           "timing": "median of CUDA-graph replays (do_bench_cudagraph); eager where not capturable",
           "records": records, "wall_s": time.monotonic() - start}
    Path(out).write_text(json.dumps(doc, indent=1))


def print_table(records: list[dict]) -> None:
    for rec in records:
        keys = [k for k in rec if k.endswith("_ms") or k in ("hbm_ratio", "triton_tflops", "sdpa_tflops")]
        if "error" in rec:
            print(f"{rec['kernel']:24s} ERROR {rec['error']}")
            continue
        shape = {k: rec[k] for k in ("model", "M", "B", "kv_len", "seqs", "len", "T") if k in rec}
        cells = " ".join(f"{k}={rec[k]:.4g}" for k in keys if not math.isnan(rec[k]))
        print(f"{rec['kernel']:24s} {shape} {cells}")


if __name__ == "__main__":
    main()
