"""Which workload makes random Thinker weights route like a trained model: distinct experts a decode step reads, per
row count, for each workload in turn on one engine (native words, ordinary-token prompts greedy and sampled, then
the same after router calibration), with the decode step time and its uniform-routing HBM floor.

    python bench/thinker/routing_probe.py --out bench/results/thinker-routing-probe-h200.json   # one H200
    python bench/thinker/routing_probe.py --tiny --out /tmp/probe.json                         # CPU smoke test
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.moe_routing import routing_record  # noqa: E402
from bench.thinker import engine_loop  # noqa: E402
from bench.thinker.balance import calibrate_on, calibrated_weights, decode_greedy  # noqa: E402
from bench.thinker.bench_thinker import provenance_of  # noqa: E402
from bench.thinker.random_model import random_model, real_config  # noqa: E402
from bench.thinker.roofline import copy_bandwidth, decode_step_bytes  # noqa: E402
from bench.thinker.routing_replay import trace_experts_touched  # noqa: E402
from bench.thinker.workload import PromptMaker  # noqa: E402
from runtime.checkpoint.demo_config import demo_config  # noqa: E402
from runtime.config import EngineConfig  # noqa: E402
from runtime.engine.sequence import Sequence  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from services.thinker.model import ThinkerConfig, ThinkerLM  # noqa: E402

log = logging.getLogger("routing_probe")
# name -> (prompt vocabulary, decoding, calibration (how, LM head too) from the drawn weights, or None)
VARIANTS = {
    "native-greedy": ("native", "greedy", None), "balanced-greedy": ("balanced", "greedy", None),
    "balanced-sampled": ("balanced", "model", None), "mean-greedy": ("balanced", "greedy", ("mean", False)),
    "mean-sampled": ("balanced", "model", ("mean", False)), "mean-head-greedy": ("balanced", "greedy", ("mean", True)),
    "whiten-greedy": ("balanced", "greedy", ("whiten", False)),
    "whiten-head-greedy": ("balanced", "greedy", ("whiten", True)),
    "whiten-head-sampled": ("balanced", "model", ("whiten", True)),
    "whiten2-head-greedy": ("balanced", "greedy", ("whiten", True, "decoded")),
    "whiten2light-head-greedy": ("balanced", "greedy", ("whiten-light", True, "decoded")),
    "whiten2-head-sampled": ("balanced", "model", ("whiten", True, "decoded")),
}


def sequence_factory(maker: PromptMaker, cfg: ThinkerConfig, sampling: str, max_tokens: int):  # noqa: ANN201
    options = engine_loop.workload_sampling(sampling, max_tokens)

    def make(index: int) -> Sequence:
        ids = maker.make(index).token_ids
        return engine_loop.text_sequence(index, ids, options, engine_loop.text_request(ids, cfg), "probe")
    return make


def mean_distinct_tokens(trace: engine_loop.DecodeTrace, rows: int) -> float | None:
    """Distinct tokens the decode steps of `rows` rows fed in, on average (rows alike in token share experts)."""
    counts = [len({trace.tokens[s][pos] for s, pos in step}) for step in trace.steps if len(step) == rows]
    return sum(counts) / len(counts) if counts else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tiny", action="store_true", help="the demo model on CPU in fp32")
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--measured", type=int, default=32, help="measured requests per level")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    p.add_argument("--calibration-prompts", type=int, default=512)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    template_dir = resolve_model("demo")
    config = demo_config() if args.tiny else real_config()
    cfg = ThinkerConfig.from_dict(config)
    model: ThinkerLM = ThinkerLM.load(template_dir, device, dtype) if args.tiny else random_model(config, device, dtype)
    eng = EngineConfig(max_num_seqs=max(args.concurrency), max_batch_tokens=2048,
                       kv_cache_bytes=(64 << 20) if args.tiny else (8 << 30), max_model_len=1024,
                       cuda_graphs=device.type == "cuda")
    engine = engine_loop.build_engine(model, eng, device, dtype)
    bw = copy_bandwidth(device) if device.type == "cuda" else None
    result: dict[str, Any] = {**provenance_of("python bench/thinker/routing_probe.py " + " ".join(argv or sys.argv[1:]),
                                              device), "variants": []}
    makers = {v: PromptMaker(template_dir, args.prompt_tokens, v) for v in ("native", "balanced")}
    index = 0
    drawn = {name: w.detach().clone() for name, w in calibrated_weights(model).items()}
    for name in args.variants:
        vocab, sampling, calibration = VARIANTS[name]
        for key, w in calibrated_weights(model).items():  # in place: the captured graphs keep their pointers
            w.copy_(drawn[key])
        variant: dict[str, Any] = {"name": name, "prompts": vocab, "sampling": sampling,
                                   "calibration": calibration, "levels": []}
        if calibration is not None:
            t0 = time.perf_counter()
            how, head, *on = calibration
            prompts = range(10**6, 10**6 + args.calibration_prompts)
            calibrate_on(model, {i: makers["balanced"].make(i).token_ids for i in prompts}, how, head)
            if on:  # again, from the drawn weights, on what decoding with the first calibration fed the model
                decoded = decode_greedy(engine, makers["balanced"], cfg, 2 * 10**6, 64, args.output_tokens)
                for key, w in calibrated_weights(model).items():
                    w.copy_(drawn[key])
                calibrate_on(model, decoded, how, head)
            variant["calibration_s"] = time.perf_counter() - t0
        make = sequence_factory(makers[vocab], cfg, sampling, args.output_tokens)
        trace = engine_loop.DecodeTrace()
        for c in args.concurrency:
            level = engine_loop.run_level(engine, make, c, c, max(args.measured, c), index, trace)
            index = level.pop("next_index")
            level.pop("raw", None)
            steps = level["decode_steps"]
            if bw and steps.get("steps"):
                floor = decode_step_bytes(cfg, c, steps["kv_tokens_p50"])["total"] / bw * 1e3
                steps.update(hbm_floor_ms=floor, roofline_ratio_step=floor / steps["step_ms_p50"])
            variant["levels"].append(level)
        distinct_tokens = {c: mean_distinct_tokens(trace, c) for c in args.concurrency}
        touched = trace_experts_touched(model, trace)
        variant["routing"] = routing_record("balanced" if vocab == "balanced" else "native", touched,
                                            "replay of the run's sequences through the same weights")
        variant["distinct_fed_tokens_per_step"] = distinct_tokens
        result["variants"].append(variant)
        log.info("%s: %s", name, {r: round(v["measured"], 1) for r, v in touched.items()})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
