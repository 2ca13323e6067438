"""A frame's code pick per call: the sampler's one-launch Triton kernel (runtime/sampler/pick_triton.py) against its
torch reference (`_Picker`, "topk" mode), at the talker's vocabulary (codebook 0, control ids suppressed) and the
code predictor's; writes JSON.

Run on the GPU machine:  PYTHONPATH=. python bench/talker/bench_pick.py --out pick.json
A time is one call's share of a CUDA graph of --calls back-to-back calls (CUDA events around --iters replays, median
of --repeats), the way the frame graphs run them. Every row samples with the model's defaults (talker: temperature
0.9, top_k 50; predictor: temperature 1.0, top_k 50, top_p 0.8); the settings are prepared outside the graph, once
per frame, on both paths. `frame_us` is one talker pick plus 15 predictor picks.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import torch
import triton

from runtime.sampler.knobs import WIDTH
from runtime.sampler.pick_triton import pick_triton
from services.talker.model.frame_step import (
    PRED_TEMPERATURE, PRED_TOP_K, PRED_TOP_P, TEMPERATURE, TOP_K, TOP_P, _Picker, knob_row,
)
from services.talker.model.sampling import TalkerSampling

TALKER_VOCAB, PREDICTOR_VOCAB, CODEBOOK = 3072, 2048, 2048
CODEC_EOS = 2150  # the one control id the talker's suppression leaves
PREDICTOR_CODEBOOKS = 15


def inputs(vocab: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 scores (the talker's with its control ids at -inf but EOS, as FrameStep masks them) and uniforms."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, vocab, generator=gen) * 3
    if vocab == TALKER_VOCAB:
        logits[:, CODEBOOK:] = float("-inf")
        logits[:, CODEC_EOS] = 0.0
    return logits.cuda(), torch.rand(batch, vocab, generator=gen).cuda()


def graph_us(call: Callable[[], torch.Tensor], calls: int, iters: int, repeats: int) -> float:
    """One call's share of a replayed CUDA graph of `calls` calls, in microseconds (median of `repeats`)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm-up off the capture: Triton compiles, the allocator grows
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(iters):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / (iters * calls))
    return statistics.median(times)


def bench_case(vocab: int, batch: int, warps: list[int], args: argparse.Namespace) -> dict[str, Any]:
    columns = (TEMPERATURE, TOP_K, TOP_P) if vocab == TALKER_VOCAB else (PRED_TEMPERATURE, PRED_TOP_K, PRED_TOP_P)
    knobs = torch.tensor([knob_row(TalkerSampling())] * batch, device="cuda")
    logits, uniforms = inputs(vocab, batch, seed=vocab + batch)
    picker = _Picker.build(knobs, columns, "topk", kernel=False)  # the torch path
    rows = picker.knobs
    assert rows is not None
    row: dict[str, Any] = {"vocab": vocab, "batch": batch,
                           "same_codes": torch.equal(picker(logits, uniforms), pick_triton(logits, uniforms, rows))}
    row["torch_us"] = graph_us(lambda: picker(logits, uniforms), args.calls, args.iters, args.repeats)
    for w in warps:
        row[f"triton_w{w}_us"] = graph_us(lambda: pick_triton(logits, uniforms, rows, num_warps=w), args.calls,
                                          args.iters, args.repeats)  # fmt: skip
    best = min(warps, key=lambda w: row[f"triton_w{w}_us"])
    row["best_warps"], row["triton_us"] = best, row[f"triton_w{best}_us"]
    row["speedup"] = row["torch_us"] / row["triton_us"]
    print(json.dumps(row))
    return row


def per_frame(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One talker pick and 15 predictor picks per batch size."""
    by_key = {(c["vocab"], c["batch"]): c for c in cases}
    frames = []
    for batch in sorted({c["batch"] for c in cases}):
        talker, predictor = by_key[(TALKER_VOCAB, batch)], by_key[(PREDICTOR_VOCAB, batch)]
        frame = {"batch": batch}
        for path in ("torch", "triton"):
            frame[f"{path}_frame_us"] = talker[f"{path}_us"] + PREDICTOR_CODEBOOKS * predictor[f"{path}_us"]
        frames.append(frame)
    return frames


def provenance() -> dict[str, Any]:
    git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return {"commit": git.stdout.strip(), "date": datetime.now(timezone.utc).isoformat(),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv])}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--warps", type=int, nargs="+", default=[2, 4, 8], help="num_warps values of the kernel")
    parser.add_argument("--calls", type=int, default=16, help="picks per captured graph (a frame makes 16)")
    parser.add_argument("--iters", type=int, default=50, help="graph replays per timing")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_pick needs a CUDA device")
    with torch.no_grad():
        cases = [bench_case(v, b, args.warps, args) for v in (TALKER_VOCAB, PREDICTOR_VOCAB) for b in args.batches]
    result = {**provenance(), "width": WIDTH, "calls_per_graph": args.calls, "cases": cases,
              "frames": per_frame(cases)}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
