"""Text->text engine benchmark of the other decoder LMs the thinker serves: Qwen3.5 9B and 35B-A3B (hybrid Gated
DeltaNet) and Qwen3-ASR's 1.7B Qwen3, at released dims (bench/thinker/lm_families.py), with transformers `generate`
on the very same weights in the same run.

The weights are transformers' own random init of its causal-LM class; our engine serves those tensors (no copy),
so the two runs read the same bytes and, for the MoE, route alike. The MoE is balanced first (routers and head
whitened on their inputs: bench/thinker/balance.py), and its record says how many experts a decode step read.

    python bench/thinker/bench_lm.py --family qwen3.5-9b --concurrency 1 32 --out bench/results/q35-9b-h200.json
    python bench/thinker/bench_lm.py --family qwen3-asr-1.7b --prompt-tokens 72 --output-tokens 40 \
        --concurrency 1 16 32 64 --out bench/results/asr-lm-h200.json
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.thinker.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.thinker.args import add_arguments  # noqa: E402
from bench.thinker.balance import balance_routing  # noqa: E402
from bench.thinker.bench_thinker import Bench, free_cuda, provenance  # noqa: E402
from bench.thinker.hf_baseline import time_generate  # noqa: E402
from bench.thinker.lm_families import FAMILIES, LMFamily  # noqa: E402
from bench.thinker.roofline import copy_bandwidth, model_step_bytes  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from services.thinker.model import ThinkerConfig, ThinkerLM  # noqa: E402
from services.thinker.model.checkpoint import fuse_experts  # noqa: E402
from services.thinker.model.hybrid_lm import HybridLM  # noqa: E402

log = logging.getLogger("bench_lm")
CALIBRATION_PROMPTS = 256  # a hybrid replay holds one state slot per prompt (~60 MiB each at 35B-A3B)


def transformers_model(family: LMFamily, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """The decoder in transformers at released dims, with its own random init, on `device`."""
    import transformers

    fields = {k: v for k, v in family.text_config.items() if k != "model_type"}
    config = getattr(transformers, family.hf_config_class)(**fields)
    with torch.device(device):
        model = getattr(transformers, family.hf_class)._from_config(config, dtype=dtype)
    return model.eval().requires_grad_(False)


def served_model(hf: torch.nn.Module, cfg: ThinkerConfig, device: torch.device) -> ThinkerLM | HybridLM:
    """Our LM over transformers' tensors themselves (its `model.` names are our names; experts are fused alike)."""
    state = {name.removeprefix("model."): t for name, t in hf.state_dict().items()}
    state = fuse_experts(state, cfg)
    cls = HybridLM if cfg.hybrid is not None else ThinkerLM
    return cls.from_state_dict(cfg, state, device)


class LMBench(Bench):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.family = FAMILIES[args.family](args.tiny)
        self.template_dir = resolve_model(self.family.demo_model)
        self.config = self.family.root
        self.cfg = ThinkerConfig.from_dict(self.config)
        self.hf: torch.nn.Module | None = None
        self.served: ThinkerLM | HybridLM | None = None  # our model over self.hf's tensors
        self.result.update(provenance(args, self.device))
        self.result.update(
            family=self.family.name, weights="transformers' own random init, the same tensors served by both",
            dims={k: getattr(self.cfg, k) for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                                    "head_dim", "num_experts", "num_experts_per_tok",
                                                    "moe_intermediate_size", "vocab_size")},
            hybrid=None if self.cfg.hybrid is None else {k: v for k, v in vars(self.cfg.hybrid).items()},
            targets=None)
        self.result["workload"].pop("long_prompt", None)

    def load_model(self) -> ThinkerLM | HybridLM:
        t0 = time.perf_counter()
        self.hf = transformers_model(self.family, self.device, self.dtype)
        model = served_model(self.hf, self.cfg, self.device)
        self.result["model_load_s"] = time.perf_counter() - t0
        self.result["kernel_path"] = model.use_kernels
        if self.family.is_moe and self.args.routing == "balanced":
            self.result["routing_calibration"] = balance_routing(
                model, self.prompt_maker(self.args.prompt_tokens), self.device, self.dtype,
                prompts=CALIBRATION_PROMPTS)
        return model

    def _count_experts(self, model: Any, trace: Any) -> None:
        if self.family.is_moe:
            super()._count_experts(model, trace)

    def _roofline(self, level: dict[str, Any]) -> None:
        steps = level.get("decode_steps", {})
        bw = self.result.get("copy_bandwidth_Bps")
        if not steps.get("steps") or not bw or self.served is None:
            return
        need = model_step_bytes(self.served, steps["rows"], steps["kv_tokens_p50"])
        floor_ms = need["total"] / bw * 1e3
        steps.update(hbm_bytes=need["total"], hbm_state_bytes=need["state"], hbm_floor_ms=floor_ms,
                     experts_per_layer_if_uniform=need["experts_per_layer"],
                     roofline_ratio_step=floor_ms / steps["step_ms_p50"],
                     roofline_ratio_model=floor_ms / steps["model_ms_p50"])

    def _profile(self, runner: Any, out: dict[str, Any]) -> None:
        """Omni's replay profile assumes its own layers; the levels' step times stand for the hybrid."""

    def ratios(self) -> None:
        """Against transformers at the same batch, and requests/s (an ASR figure); no Omni targets here."""
        super().ratios()
        levels = self.result.get("engine", {}).get("levels", [])
        engine = self.result["summary"]["engine"]
        engine.pop("meets", None)
        engine.pop("ttft_long_ms_p50", None)
        self.result["summary"].pop("gateway", None)
        for lv in levels:
            if lv.get("window_s"):
                engine[f"c{lv['concurrency']}_requests_s"] = lv["requests"] / lv["window_s"]
        self.save()

    def run_hf(self) -> None:
        assert self.hf is not None, "load_model builds the transformers model first"
        maker = self.prompt_maker(self.args.prompt_tokens)
        prompts = [maker.make(200_000 + i).token_ids for i in range(max(self.args.hf_batches))]
        runs = time_generate(self.hf, self.args.hf_batches, prompts, self.hf_tokens, self.device,
                             self.cfg.num_experts, self.cfg.num_experts_per_tok)
        self.result["transformers"] = {"note": "same weights and prompts; greedy; min_new_tokens = max_new_tokens",
                                       "runs": runs}
        self.save()


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = LMBench(args)
    if bench.device.type == "cuda":
        bench.result["copy_bandwidth_Bps"] = copy_bandwidth(bench.device)
    bench.served = bench.phase("model", bench.load_model)
    if bench.served is not None:
        bench.phase("engine", lambda: bench.run_engine(bench.served))
        free_cuda()
        if not args.skip_hf:
            bench.phase("transformers", bench.run_hf)
    bench.served = bench.hf = None
    free_cuda()
    bench.ratios()
    return bench.result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--family", choices=sorted(FAMILIES), required=True)
    parser.set_defaults(modes=["engine"], long_prompt_tokens=0, hf_batches=[1, 32], hf_new_tokens=64)
    args = parser.parse_args(argv)
    args.prog = f"python bench/thinker/bench_lm.py --family {args.family}"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run(args)


if __name__ == "__main__":
    main()
