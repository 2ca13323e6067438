"""Which router calibration makes random talker weights route like a trained model: for each variant in turn, from
the same drawn weights, the distinct experts a layer reads per decode step (layer by layer) at each batch size,
beside the uniform expectation (bench/talker/balance.py, bench/moe_routing.py).

    python bench/talker/routing_probe.py --out probe.json                       # real dims, one GPU
    python bench/talker/routing_probe.py --tiny --out /tmp/probe.json           # CPU smoke test
A variant is HOW:ORDER:FRAMES: a calibration of bench/moe_routing.py, `layers` (one pass per layer in order) or
`all` (two passes over every layer), and the eager decode steps each pass drives.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.moe_routing import CALIBRATIONS  # noqa: E402
from bench.talker.balance import talker_routers  # noqa: E402
from bench.talker.bench_talker import calibrate_routing, provenance, random_model, real_config, routing  # noqa: E402
from runtime.checkpoint.demo_config import demo_config  # noqa: E402
from services.talker.model.config import parse_talker_config  # noqa: E402

DEFAULT_VARIANTS = ["whiten:all:32", "whiten:layers:32"]


def parse_variant(text: str) -> dict[str, Any]:
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in CALIBRATIONS or parts[1] not in ("layers", "all") \
            or not parts[2].isdigit() or int(parts[2]) < 1:
        raise ValueError(f"variant {text!r}: expected HOW:ORDER:FRAMES, HOW one of {sorted(CALIBRATIONS)}, ORDER "
                         "'layers' or 'all', FRAMES a positive count")
    return {"name": text, "how": parts[0], "per_layer": parts[1] == "layers", "frames": int(parts[2])}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="demo dims (32 experts, top-2) on CPU, fp32")
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="HOW:ORDER:FRAMES each")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32], help="measured batch sizes")
    parser.add_argument("--calibration-batch", type=int, default=None, help="rows each pass drives (default: "
                        "the largest measured batch)")
    parser.add_argument("--frames", type=int, default=16, help="measured decode steps per batch")
    args = parser.parse_args(argv)
    args.argv = argv or sys.argv[1:]
    variants = [parse_variant(v) for v in args.variants]
    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    raw = demo_config() if args.tiny else real_config()
    if args.tiny:
        raw["talker_config"]["text_config"].update(num_experts=32, num_experts_per_tok=2, moe_intermediate_size=16)
    torch.manual_seed(0)
    model = random_model(parse_talker_config(raw), device, torch.float32 if args.tiny else torch.bfloat16)
    routers = talker_routers(model)
    drawn = [r.weight.detach().clone() for r in routers]
    results = []
    with torch.no_grad():
        native = routing(model, "native", args.batches, args.frames)
        for v in variants:
            for r, w in zip(routers, drawn):
                r.weight.copy_(w)
            t0 = time.perf_counter()
            done = calibrate_routing(model, args.calibration_batch or max(args.batches), v["frames"],
                                     how=v["how"], per_layer=v["per_layer"])
            record = routing(model, "balanced", args.batches, args.frames)
            results.append({**v, "calibration": done, "routing": record, "seconds": time.perf_counter() - t0})
            print(v["name"], {k: (round(x["measured"], 1), round(x["uniform"], 1))
                              for k, x in record["experts_touched"].items()}, flush=True)
    out = {**provenance(device, args), "command": " ".join(["bench/talker/routing_probe.py", *args.argv]),
           "workload": "bench_talker's rows, eager decode steps", "native": native, "variants": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
