"""The thinker's sampler per decode step: launch_sample's host + device time on a real vocabulary's logits.

Rows of the model's default sampling (temperature 0.7, top-k 20, top-p 0.8, seeded) draw among their top 64
(`runtime/sampler/pick.py`, the narrow path); the same rows with top-k off sort the vocabulary (the full path);
greedy rows take one argmax. Each call is timed to its tokens on the host, as the engine reads them:

    PYTHONPATH=.:protos python3 bench/thinker/bench_sampler.py --device cuda --out bench/results/sampler-h200.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runtime.engine.sampler import launch_sample  # noqa: E402
from runtime.engine.sampling_params import SamplingOptions  # noqa: E402
from runtime.sampler.streams import RowGenerators  # noqa: E402

KINDS = {
    "greedy": SamplingOptions(temperature=0.0),
    "narrow": SamplingOptions(temperature=0.7, top_k=20, top_p=0.8),  # the model's defaults
    "full": SamplingOptions(temperature=0.7, top_k=0, top_p=0.8),  # the same without top-k: a sort of the vocabulary
}


def time_kind(kind: str, rows: int, vocab: int, device: torch.device, repeat: int) -> dict[str, Any]:
    logits = torch.randn(rows, vocab, device=device, generator=torch.Generator(device).manual_seed(0))
    options = [KINDS[kind]] * rows
    gens = RowGenerators(device)
    generators = [None if kind == "greedy" else gens.get(i, seed=i) for i in range(rows)]
    times = []
    for i in range(repeat + 3):  # three warm-up calls
        t0 = time.perf_counter()
        launch_sample(logits, options, generators, [[]] * rows, [[]] * rows).result()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return {"kind": kind, "rows": rows, "vocab": vocab, "ms_median": statistics.median(times) * 1e3,
            "ms_min": min(times) * 1e3}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="bench_sampler", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--vocab", type=int, default=152_064, help="the thinker's (Qwen3-Omni)")
    p.add_argument("--repeat", type=int, default=50)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    records = [time_kind(kind, rows, args.vocab, device, args.repeat) for rows in args.rows for kind in KINDS]
    for r in records:
        print(json.dumps(r), flush=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"benchmark": "thinker_sampler", "commit": head or "unknown", "date": time.strftime("%FT%TZ"),
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "command": " ".join(["bench/thinker/bench_sampler.py", *(argv if argv is not None else sys.argv[1:])]),
              "timing": "wall time of launch_sample(...).result() per call (host work, launches, the device, the "
                        "read-back), median of --repeat after 3 warm-up calls", "records": records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
