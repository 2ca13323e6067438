"""Thinker text->text benchmark: engine-only and through the gateway at concurrency 1/4/16/32 (closed loop), with
TTFT for a long prompt, the HBM roofline ratio, and the same workload through transformers `generate`.

    python bench/thinker/bench_thinker.py --random-weights --out bench/results/thinker-h200.json   # one H200
    python bench/thinker/bench_thinker.py --tiny --out /tmp/thinker_tiny.json                     # CPU smoke test
    omnimesh bench --tiny --out /tmp/thinker_tiny.json                                             # the same

Phases run in that order (engine, checkpoint for the gateway, transformers, gateway) so the GPU holds one model
at a time; the JSON is rewritten after each phase, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.thinker.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.moe_routing import ROW_COUNTS, routing_record  # noqa: E402
from bench.thinker import engine_loop, gateway_loop  # noqa: E402
from bench.thinker.args import add_arguments, command_line  # noqa: E402
from bench.thinker.hf_baseline import hf_generate  # noqa: E402
from bench.thinker.random_model import random_model, real_config, write_checkpoint  # noqa: E402
from bench.thinker.balance import balance_routing  # noqa: E402
from bench.thinker.roofline import copy_bandwidth, decode_step_bytes  # noqa: E402
from bench.thinker.routing_replay import trace_experts_touched  # noqa: E402
from bench.thinker.workload import PromptMaker  # noqa: E402
from runtime.checkpoint.demo_config import demo_config  # noqa: E402
from omnimesh.v1 import omni_pb2  # noqa: E402
from runtime.config import EngineConfig  # noqa: E402
from runtime.engine.sequence import Sequence  # noqa: E402
from runtime.model_path import resolve_model  # noqa: E402
from services.thinker.model import ThinkerConfig, ThinkerLM  # noqa: E402
from services.thinker.request import ThinkerRequest  # noqa: E402

log = logging.getLogger("bench_thinker")
# issue 23 (one H200, balanced routing, through the gateway); the earlier 2,200 / 60 ms were on the native workload
TARGETS = {"c1_tok_s": 450.0, "c32_tok_s": 2100.0, "ttft_1k_ms_p50": 40.0}


def engine_config(args: argparse.Namespace) -> EngineConfig:
    max_num_seqs = args.max_num_seqs or max(args.concurrency)
    return EngineConfig(
        max_num_seqs=max_num_seqs, max_batch_tokens=args.max_batch_tokens, block_size=args.block_size,
        kv_cache_bytes=int((args.kv_cache_gib or (1 / 16 if args.tiny else 16)) * 2**30),
        max_model_len=args.max_model_len,
        cuda_graphs=not args.no_graphs, late_launch=args.late_launch,
        decode_batch_buckets=tuple(b for b in args.decode_buckets if b <= max_num_seqs),
        prefill_token_buckets=tuple(n for n in args.prefill_buckets if n <= args.max_batch_tokens))


def provenance(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    return provenance_of(command_line(args.prog, args), device)


def provenance_of(command: str, device: torch.device) -> dict[str, Any]:
    """Commit, date, device, versions and the command of a result file."""
    git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False,
                         cwd=Path(__file__).resolve().parent)
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=False,
                           cwd=Path(__file__).resolve().parent)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton
        import transformers

        versions.update(triton=triton.__version__, transformers=transformers.__version__)
    except ImportError:
        pass
    # the GPU machine's copy carries a stale .git (or none): there the caller names the commit it sent
    commit = os.environ.get("OMNIMESH_COMMIT") or git.stdout.strip()
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):  # a short sha names it too
        commit = "unknown: no git history here; set OMNIMESH_COMMIT"
    return {"commit": commit, "uncommitted_changes": bool(dirty.stdout.strip()),
            "date": datetime.now(timezone.utc).isoformat(), "device": name, "versions": versions,
            "command": command}


class Bench:
    """One run's state: where results go, the workload, and the phases."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tiny = args.tiny
        self.device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
        self.dtype = torch.float32 if args.tiny else torch.bfloat16
        self.template_dir = resolve_model("demo")  # tokenizer and chat template (the real Qwen vocabulary)
        self.config = demo_config() if args.tiny else real_config()
        self.cfg = ThinkerConfig.from_dict(self.config)
        self.eng = engine_config(args)
        self.hf_tokens = args.hf_new_tokens or args.output_tokens
        self.result: dict[str, Any] = {
            **provenance(args, self.device), "dtype": str(self.dtype).removeprefix("torch."),
            "weights": "demo checkpoint" if args.tiny else ("checkpoint" if args.model else "random (std 0.02)"),
            "dims": {k: getattr(self.cfg, k) for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                                       "head_dim", "num_experts", "num_experts_per_tok",
                                                       "moe_intermediate_size", "vocab_size")},
            "engine_config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self.eng).items()},
            "workload": {"name": "text->text", "load": "closed loop", "prompt_tokens": args.prompt_tokens,
                         "output_tokens": args.output_tokens, "ignore_eos": True,
                         "greedy": args.sampling == "greedy", "sampling": args.sampling,
                         "warmup_requests": "= concurrency (excluded)",
                         "measured_requests": f"max({args.min_measured}, {args.measured_per_stream} x c)",
                         "long_prompt": {"prompt_tokens": args.long_prompt_tokens,
                                         "output_tokens": args.long_output_tokens, "requests": args.long_requests}},
            "targets": TARGETS, "phase_s": {}, "errors": {},
        }

    def save(self) -> None:
        self.args.out.parent.mkdir(parents=True, exist_ok=True)
        self.args.out.write_text(json.dumps(self.result, indent=1))

    def phase(self, name: str, fn: Callable[[], Any]) -> Any:
        """fn() timed into `phase_s`; if it fails, its traceback goes to `errors` and None comes back, so one broken
        phase costs only itself. The result file is rewritten either way."""
        t0 = time.perf_counter()
        try:
            return fn()
        except Exception:  # noqa: BLE001 - recorded in the result; the other phases still run
            self.result["errors"][name] = traceback.format_exc()
            log.exception("phase %s failed", name)
            return None
        finally:
            self.result["phase_s"][name] = time.perf_counter() - t0
            self.save()

    def measured(self, c: int) -> int:
        return max(self.args.min_measured, self.args.measured_per_stream * c)

    # --- engine-only -------------------------------------------------------------------------------------------
    def load_model(self) -> ThinkerLM:
        t0 = time.perf_counter()
        if self.args.model:
            model = ThinkerLM.load(self.args.model, self.device, self.dtype)
        elif self.tiny:
            model = ThinkerLM.load(self.template_dir, self.device, self.dtype)
        else:
            model = random_model(self.config, self.device, self.dtype)
        self.result["model_load_s"] = time.perf_counter() - t0
        self.result["kernel_path"] = model.use_kernels
        if not (self.args.model or self.tiny) and self.args.routing == "balanced":  # random weights only
            self.result["routing_calibration"] = balance_routing(
                model, self.prompt_maker(self.args.prompt_tokens), self.device, self.dtype)
        return model

    def prompt_maker(self, num_tokens: int) -> PromptMaker:
        return PromptMaker(self.template_dir, num_tokens, self.args.routing)

    def make_seq_factory(self, maker: PromptMaker, max_tokens: int):  # noqa: ANN201
        sampling = engine_loop.workload_sampling(self.args.sampling, max_tokens)
        cache: dict[int, tuple[list[int], ThinkerRequest]] = {}

        def prepare(indices: range) -> None:
            for i in indices:
                ids = maker.make(i).token_ids
                cache[i] = (ids, engine_loop.text_request(ids, self.cfg))

        def make(index: int) -> Sequence:
            if index not in cache:
                prepare(range(index, index + 1))
            ids, req = cache.pop(index)
            return engine_loop.text_sequence(index, ids, sampling, req)

        return make, prepare

    def run_engine(self, model: ThinkerLM) -> None:
        args = self.args
        t0 = time.perf_counter()
        engine = engine_loop.build_engine(model, self.eng, self.device, self.dtype)
        runner = engine.runner.inner
        out: dict[str, Any] = {"build_s": time.perf_counter() - t0, "levels": [],
                               "captures": [vars(r) for r in runner.capture_records]}
        self.result["engine"] = out
        maker = self.prompt_maker(args.prompt_tokens)
        make, prepare = self.make_seq_factory(maker, args.output_tokens)
        index = 0
        trace = engine_loop.DecodeTrace()
        for c in args.concurrency:
            prepare(range(index, index + 2 * c + self.measured(c)))
            level = engine_loop.run_level(engine, make, c, c, self.measured(c), index, trace)
            index = level.pop("next_index")
            self._roofline(level)
            out["levels"].append(level)
            log.info("engine c=%d: %.1f tok/s, TTFT p50 %.1f ms, TPOT p50 %.2f ms", c, level["output_tok_s"] or 0,
                     level["ttft_ms_p50"] or 0, level["tpot_ms_p50"] or 0)
            self.save()
        if args.long_prompt_tokens:
            long_maker = self.prompt_maker(args.long_prompt_tokens)
            make_long, prepare_long = self.make_seq_factory(long_maker, args.long_output_tokens)
            prepare_long(range(index, index + args.long_requests + 2))
            level = engine_loop.run_level(engine, make_long, 1, 1, args.long_requests, index)
            index = level.pop("next_index")
            out["long_prompt"] = level
        self._count_experts(runner.model, trace)
        if runner.graphs is not None:
            out["graph_steps"] = dict(runner.graphs.replays)
        out["eager_text_steps"] = runner.eager_steps
        self.save()
        if self.device.type == "cuda" and runner.graphs is not None:
            self._profile(runner, out)
        del engine, runner

    def _count_experts(self, model: ThinkerLM, trace: engine_loop.DecodeTrace) -> None:
        """The routing record: distinct experts the measured levels' decode steps read (their sequences replayed
        through the same weights), beside the uniform expectation."""
        t0 = time.perf_counter()
        touched = trace_experts_touched(model, trace, sorted(set(ROW_COUNTS) | set(self.args.concurrency)))
        self.result["routing"] = routing_record(
            self.args.routing, touched, "the engine levels' decode steps, their sequences replayed through the same "
            "weights with the routers tapped (bench/thinker/routing_replay.py); the gateway run serves the same "
            "weights and workload")
        self.result["routing"]["count_s"] = time.perf_counter() - t0
        self.save()

    def _roofline(self, level: dict[str, Any]) -> None:
        steps = level.get("decode_steps", {})
        bw = self.result.get("copy_bandwidth_Bps")
        if not steps.get("steps") or not bw:
            return
        need = decode_step_bytes(self.cfg, steps["rows"], steps["kv_tokens_p50"])
        floor_ms = need["total"] / bw * 1e3
        # the floor assumes uniform routing; a model routing rows to shared experts reads less (ratio can pass 1)
        steps.update(hbm_bytes=need["total"], hbm_floor_ms=floor_ms,
                     experts_per_layer_if_uniform=need["experts_per_layer"],
                     roofline_ratio_step=floor_ms / steps["step_ms_p50"],
                     roofline_ratio_model=floor_ms / steps["model_ms_p50"])

    def _profile(self, runner: Any, out: dict[str, Any]) -> None:
        from bench.thinker.step_profile import kernel_breakdown, replay_ms

        bw = self.result["copy_bandwidth_Bps"]
        kv_len = self.args.prompt_tokens + self.args.output_tokens // 2
        rows = []
        for b in sorted(runner.graphs.decode):
            ms = replay_ms(runner, b, kv_len)
            floor = decode_step_bytes(self.cfg, b, b * kv_len)["total"] / bw * 1e3
            rows.append({"rows": b, "kv_len": kv_len, "replay_ms": ms, "hbm_floor_ms": floor,
                         "roofline_ratio": floor / ms if ms else None, "tok_s": b / ms * 1e3 if ms else None})
        out["graph_replay"] = rows
        self.save()
        try:
            out["kernel_profile"] = [kernel_breakdown(runner, b, kv_len) for b in (1, max(runner.graphs.decode))]
        except Exception as e:  # noqa: BLE001 - the profiler is a diagnostic; the numbers above stand without it
            out["kernel_profile_error"] = repr(e)
        self.save()

    # --- checkpoint, transformers, gateway ----------------------------------------------------------------------
    def checkpoint_dir(self, model: ThinkerLM) -> Path:
        need = sum(t.numel() * t.element_size() for t in model.state_dict().values()) + (1 << 30)
        candidates = [self.args.ckpt_dir] if self.args.ckpt_dir else [Path("/dev/shm"), Path(tempfile.gettempdir())]
        for base in candidates:
            base.mkdir(parents=True, exist_ok=True)
            if shutil.disk_usage(base).free >= need:
                return Path(tempfile.mkdtemp(prefix="thinker-random-", dir=base))
        raise OSError(f"no room for a {need / 2**30:.1f} GiB checkpoint in {[str(c) for c in candidates]}")

    def write_random_checkpoint(self, model: ThinkerLM) -> Path:
        t0 = time.perf_counter()
        out = self.checkpoint_dir(model)
        nbytes = write_checkpoint(model, self.config, out, self.template_dir)
        self.result["checkpoint"] = {"dir": str(out), "bytes": nbytes, "write_s": time.perf_counter() - t0}
        self.save()
        return out

    def run_hf(self) -> None:
        maker = self.prompt_maker(self.args.prompt_tokens)
        prompts = [maker.make(200_000 + i).token_ids for i in range(max(self.args.hf_batches))]
        checkpoint = self.result.get("checkpoint", {}).get("dir")
        hf = hf_generate(self.config, self.args.hf_batches, prompts, self.hf_tokens, self.device, self.dtype,
                         Path(checkpoint) if checkpoint else None)
        self.result["transformers"] = {"note": "same prompts; greedy; min_new_tokens = max_new_tokens", **hf}
        self.save()

    def run_gateway(self, model_dir: Path) -> None:
        args = self.args
        engine = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self.eng).items()}
        thinker = {"device": self.device.type, "dtype": str(self.dtype).removeprefix("torch."), "engine": engine}
        out: dict[str, Any] = {"levels": []}
        self.result["gateway"] = out
        log_path = args.out.with_suffix(".mesh.log")
        t0 = time.perf_counter()
        with open(log_path, "w") as log_file:
            mesh = gateway_loop.Mesh(model_dir, thinker, Path(tempfile.mkdtemp(prefix="bench-mesh-")), log_file,
                                     args.ready_timeout, log_level=args.mesh_log_level)
            out["startup_s"] = time.perf_counter() - t0
            try:
                self._gateway_levels(mesh, out)
            finally:
                out["mesh_exit"] = mesh.stop()
        out["mesh_log"] = str(log_path)
        self.save()

    def _gateway_levels(self, mesh: gateway_loop.Mesh, out: dict[str, Any]) -> None:
        args = self.args
        maker = self.prompt_maker(args.prompt_tokens)
        index = 100_000  # other texts than the engine run's: nothing is cached across phases anyway
        for c in args.concurrency:
            requests = {i: self.chat_request(maker.make(i).text, args.output_tokens, i)
                        for i in range(index, index + 2 * c + self.measured(c))}
            level = gateway_loop.run_level_with_stages(mesh, lambda i: requests.get(i) or self.chat_request(
                maker.make(i).text, args.output_tokens, i), c, c, self.measured(c), index, args.think_ms / 1000)
            index = level.pop("next_index")
            out["levels"].append(level)
            log.info("gateway c=%d: %.1f tok/s, TTFT p50 %.1f ms", c, level["output_tok_s"] or 0,
                     level["ttft_ms_p50"] or 0)
            self.save()
        if args.long_prompt_tokens:
            long_maker = self.prompt_maker(args.long_prompt_tokens)
            # the long prompts with their usual answer, then alone (one token each): there every reported engine
            # step is a prefill, so the stages' step_ms_mean beside the TTFT says what of it was not the step
            for key, tokens in (("long_prompt", args.long_output_tokens), ("long_prompt_first_token", 1)):
                level = gateway_loop.run_level_with_stages(mesh, lambda i, n=tokens: self.chat_request(
                    long_maker.make(i).text, n, i), 1, 1, args.long_requests, index)
                index = level.pop("next_index")
                out[key] = level
                self.save()

    def chat_request(self, text: str, max_tokens: int, index: int) -> omni_pb2.ChatRequest:
        return gateway_loop.chat_request(text, max_tokens, None if self.args.sampling == "greedy" else index)

    def ratios(self) -> None:
        hf = {r["batch"]: r["output_tok_s"] for r in self.result.get("transformers", {}).get("runs", [])}
        summary: dict[str, Any] = {}
        for mode in ("engine", "gateway"):
            levels = {lv["concurrency"]: lv for lv in self.result.get(mode, {}).get("levels", [])}
            summary[mode] = {f"c{c}_tok_s": lv.get("output_tok_s") for c, lv in levels.items()}
            for c, lv in levels.items():
                if c in hf and lv.get("output_tok_s"):
                    summary[mode][f"c{c}_over_transformers_b{c}"] = lv["output_tok_s"] / hf[c]
            long = self.result.get(mode, {}).get("long_prompt", {})
            summary[mode]["ttft_long_ms_p50"] = long.get("ttft_ms_p50")
            summary[mode]["meets"] = {
                "c1_tok_s": (levels.get(1, {}).get("output_tok_s") or 0) >= TARGETS["c1_tok_s"],
                "c32_tok_s": (levels.get(32, {}).get("output_tok_s") or 0) >= TARGETS["c32_tok_s"],
                "ttft_1k_ms_p50": long.get("ttft_ms_p50") is not None and long["ttft_ms_p50"] <= TARGETS[
                    "ttft_1k_ms_p50"] and self.args.long_prompt_tokens == 1024}
        self.result["summary"] = summary
        self.save()


def free_cuda() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Each phase that fails is recorded under "errors" and the run goes on, so one broken phase costs only itself."""
    bench = Bench(args)
    bench.save()
    phase = bench.phase
    if bench.device.type == "cuda":
        bench.result["copy_bandwidth_Bps"] = copy_bandwidth(bench.device)
    model_dir = args.model or (bench.template_dir if args.tiny else None)
    if "engine" in args.modes or ("gateway" in args.modes and model_dir is None):
        model = phase("model", bench.load_model)
        if model is not None and "engine" in args.modes:
            phase("engine", lambda: bench.run_engine(model))
        if model is not None and "gateway" in args.modes and model_dir is None:
            model_dir = phase("checkpoint", lambda: bench.write_random_checkpoint(model))
        del model
        free_cuda()
    if not args.skip_hf:
        phase("transformers", bench.run_hf)
        free_cuda()
    try:
        if "gateway" in args.modes and model_dir is not None:
            phase("gateway", lambda: bench.run_gateway(model_dir))
    finally:
        if "checkpoint" in bench.result:
            shutil.rmtree(bench.result["checkpoint"]["dir"], ignore_errors=True)
    bench.ratios()
    return bench.result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.prog = "python bench/thinker/bench_thinker.py"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run_bench(args)


if __name__ == "__main__":
    main()
