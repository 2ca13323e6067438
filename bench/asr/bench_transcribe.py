"""Qwen3-ASR end to end (issue 24): `omnimesh up` with the audio encoder and thinker stages as real processes, a
closed loop of Transcribe RPCs at each concurrency, each request a distinct 4 s speech-like clip with 40 output
tokens (EOS ignored, greedy).

    python bench/asr/bench_transcribe.py --out bench/results/asr-transcribe-h200.json   # one H200, real 1.7B dims
    python bench/asr/bench_transcribe.py --tiny --out /tmp/asr_tiny.json                # CPU smoke test

Weights: random bf16 at the released Qwen3-ASR-1.7B dims, built on the GPU with transformers' own init into
/dev/shm (bench/asr/checkpoint.py) and removed at the end; --tiny serves the demo checkpoint on the CPU in fp32.
Transcribe forces the language ("en") so every generated token is transcript (transcribe_loop.py says why) and
passes `ignore_eos`, so each request makes exactly --output-tokens tokens; the result records each one's count.
Per level: requests/s and output tok/s over the measured window, latency (request start -> last event) p50/p95/p99,
time to first text event, the stages' step counters and CPU, and every measured request's raw record. The JSON is
rewritten after each level, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo root importable for `bench.*`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.asr.checkpoint import build_random_checkpoint, default_ckpt_root, dims_of, real_config  # noqa: E402
from bench.asr.clips import ClipBank  # noqa: E402
from bench.asr.transcribe_loop import LANGUAGE, run_level, transcribe_request  # noqa: E402
from bench.asr.targets import PEER, summary  # noqa: E402
from bench.thinker.bench_thinker import provenance_of  # noqa: E402
from bench.thinker.gateway_loop import Mesh  # noqa: E402
from bench.thinker.stage_counters import measured_phase, read_stage  # noqa: E402
from runtime.checkpoint.asr.demo_config import demo_config  # noqa: E402
from runtime.model_path import DEMO_ASR, resolve_model  # noqa: E402

log = logging.getLogger("bench_transcribe")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    p.add_argument("--tiny", action="store_true", help="the demo checkpoint on CPU in fp32: a smoke test")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 32, 64], help="closed-loop levels")
    p.add_argument("--clip-seconds", type=float, default=4.0)
    p.add_argument("--output-tokens", type=int, default=40, help="tokens per request (EOS ignored)")
    p.add_argument("--measured-per-stream", type=int, default=10, help="measured requests per concurrent stream")
    p.add_argument("--min-measured", type=int, default=64, help="fewest measured requests per level")
    p.add_argument("--warmup", type=int, default=0, help="warm-up requests per level (0: 2 x c, at least 4)")
    p.add_argument("--initial-warmup", type=int, default=-1,
                   help="requests at the largest c before the first level, so every batch shape the levels meet has "
                        "been compiled and captured (-1: 2 x the largest c; 0: none)")
    p.add_argument("--max-num-seqs", type=int, default=0, help="thinker rows per step (0: the largest concurrency)")
    p.add_argument("--max-batch-tokens", type=int, default=4096,
                   help="thinker tokens per step: 64 arrivals of ~60-token prompts prefill in one step")
    p.add_argument("--kv-cache-gib", type=float, default=0.0, help="KV cache (0: 8 GiB, 64 MiB with --tiny)")
    p.add_argument("--max-model-len", type=int, default=1024, help="prompt (~60) + output fit with room to spare")
    p.add_argument("--prefill-buckets", type=int, nargs="*", default=[64, 128, 256, 512, 1024, 2048, 4096],
                   help="thinker prefill token ladder for CUDA graphs (rungs above --max-batch-tokens are dropped)")
    p.add_argument("--no-graphs", action="store_true", help="thinker eager steps only")
    p.add_argument("--token-flush-ms", type=float, default=15.0, help="thinker token-delta coalescing (its default)")
    p.add_argument("--audio-batch-wait-ms", type=float, default=5.0,
                   help="how long an audio encoder forward waits for more clips (its default)")
    p.add_argument("--gateway-replicas", type=int, default=1,
                   help="gateway processes sharing its port (gateway.replicas): each has its own event loop")
    p.add_argument("--channels", type=int, default=1,
                   help="client connections the streams take in turn (at most c), as that many clients would open; "
                        "the kernel gives each to one gateway replica")
    p.add_argument("--ckpt-dir", type=Path, default=None, help="where the random checkpoint goes (default /dev/shm)")
    p.add_argument("--keep-ckpt", action="store_true", help="leave the random checkpoint in place at the end")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds the mesh may take to come up")
    p.add_argument("--seed", type=int, default=0, help="weights' seed; clip i is drawn from seed 1000003 * seed + i")
    return p.parse_args(argv)


class Bench:
    """One run's state: where results go, the mesh's settings, and the levels measured so far."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device("cuda" if not args.tiny and torch.cuda.is_available() else "cpu")
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.max_c = max(args.concurrency)
        command = "python bench/asr/bench_transcribe.py " + shlex.join(sys.argv[1:])
        config = demo_config() if args.tiny else real_config()
        self.result: dict[str, Any] = {
            "benchmark": "qwen3-asr transcribe, closed loop through the gateway (issue 24)",
            **provenance_of(command, self.device), "dtype": str(self.dtype).removeprefix("torch."),
            "weights": "demo checkpoint" if args.tiny else "random (transformers init), bf16",
            "dims": dims_of(config),
            "mesh": self.mesh_config(),
            "workload": self.workload(),
            "levels": [],
            "peer": PEER,
        }
        self.result["summary"] = summary([])

    def mesh_config(self) -> dict[str, Any]:
        """The bench_mesh.yaml sections (Mesh writes them): thinker and audio stages on one device."""
        a = self.args
        max_num_seqs = a.max_num_seqs or self.max_c
        stage = {"device": self.device.type, "dtype": str(self.dtype).removeprefix("torch.")}
        engine = {"max_num_seqs": max_num_seqs, "max_batch_tokens": max(a.max_batch_tokens, max_num_seqs),
                  "max_waiting_seqs": 4 * self.max_c, "max_model_len": a.max_model_len,
                  "kv_cache_bytes": int((a.kv_cache_gib or (1 / 16 if a.tiny else 8)) * 2**30),
                  "token_flush_ms": a.token_flush_ms, "cuda_graphs": not a.no_graphs,
                  "prefill_token_buckets": [n for n in a.prefill_buckets if n <= max(a.max_batch_tokens, max_num_seqs)]}
        return {"thinker": {**stage, "engine": engine},
                "audio": {**stage, "enabled": True, "encoder": {"batch_wait_ms": a.audio_batch_wait_ms}},
                "gateway": {"replicas": a.gateway_replicas}}

    def workload(self) -> dict[str, Any]:
        a = self.args
        return {"name": "audio->text (Transcribe)", "load": "closed loop", "concurrency": a.concurrency,
                "clip": {"seconds": a.clip_seconds, "rate_hz": 16000, "format": "WAV PCM16 mono",
                         "content": "speech-like: voiced harmonic stretches with moving formants, fricative noise, "
                                    "pauses (bench/asr/clips.py); distinct per request"},
                "language": f"forced '{LANGUAGE}' (every generated token is transcript)",
                "output_tokens": a.output_tokens, "ignore_eos": True, "greedy": True,
                "warmup_requests": a.warmup or "2 x c, at least 4 (excluded)",
                "initial_warmup_requests": (f"{a.initial_warmup}" if a.initial_warmup >= 0 else "2 x the largest c")
                + " at the largest c, before the first level (excluded)",
                "measured_requests": f"max({a.min_measured}, {a.measured_per_stream} x c)",
                "latency": "request start -> last event (done)", "ttft": "request start -> first text event",
                "client_connections": f"min(c, {a.channels})"}

    def save(self) -> None:
        self.args.out.parent.mkdir(parents=True, exist_ok=True)
        self.args.out.write_text(json.dumps(self.result, indent=1))

    def checkpoint(self) -> tuple[Path, Path | None]:
        """-> (the model dir to serve, a dir to remove at the end or None)."""
        template = resolve_model(DEMO_ASR)
        if self.args.tiny:
            return template, None
        root = self.args.ckpt_dir or default_ckpt_root()
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="omnimesh-asr-bench-", dir=root))
        t0 = time.perf_counter()
        build_random_checkpoint(tmp / "ckpt", template, self.device, self.dtype, seed=self.args.seed)
        self.result["checkpoint"] = {"dir": str(tmp / "ckpt"), "build_s": time.perf_counter() - t0,
                                     "bytes": sum(f.stat().st_size for f in (tmp / "ckpt").iterdir())}
        log.info("checkpoint built in %.1f s at %s", time.perf_counter() - t0, tmp)
        return tmp / "ckpt", tmp

    def run(self) -> None:
        a = self.args
        model_dir, cleanup = self.checkpoint()
        self.save()
        workdir = Path(tempfile.mkdtemp(prefix="omnimesh-asr-mesh-"))
        mesh_log = (a.out.parent / (a.out.stem + ".mesh.log")).open("w")
        mesh = None
        try:
            t0 = time.perf_counter()
            sections = self.mesh_config()
            mesh = Mesh(model_dir, sections["thinker"], workdir, mesh_log, a.ready_timeout,
                        stages={"audio": sections["audio"], "gateway": sections["gateway"]}, log_level="WARNING")
            self.result["mesh_up_s"] = time.perf_counter() - t0
            log.info("mesh up in %.1f s: %s", self.result["mesh_up_s"], sorted(mesh.ports))
            self.levels(mesh)
        except BaseException:  # noqa: BLE001 — keep what was measured, name what failed (SIGTERM: SystemExit 143)
            self.result["error"] = traceback.format_exc()
            raise
        finally:
            if mesh is not None:
                self.result["mesh_exit"] = mesh.stop()
            mesh_log.close()
            self.save()
            shutil.rmtree(workdir, ignore_errors=True)
            if cleanup is not None and not a.keep_ckpt:
                shutil.rmtree(cleanup, ignore_errors=True)

    def levels(self, mesh: Mesh) -> None:
        a = self.args
        clips = ClipBank(a.clip_seconds, seed_base=1_000_003 * a.seed)

        def make(index: int):
            return transcribe_request(clips[index], a.output_tokens, index)

        index = 0
        first = 2 * self.max_c if a.initial_warmup < 0 else a.initial_warmup
        if first:
            clips.prepare(index, first + self.max_c)
            level = run_level(mesh.address, make, self.max_c, 0, first, index, a.channels)
            index = level["next_index"]
            self.result["initial_warmup"] = {k: level.get(k) for k in ("concurrency", "requests", "requests_per_s",
                                                                        "latency_ms_p50", "latency_ms_p99")}
            self.save()
        for c in a.concurrency:
            warmup = a.warmup or max(4, 2 * c)
            measured = max(a.min_measured, a.measured_per_stream * c)
            clips.prepare(index, warmup + measured + c)  # + c: the load-keeping extras that run past the last one
            # the client (this process) is read too: its event loop relays every stream, as the gateway's does
            with measured_phase(lambda: mesh.readings() | {"client": read_stage(os.getpid(), None)}) as phase:
                level = run_level(mesh.address, make, c, warmup, measured, index, a.channels)
            level["level_s"], level["stages_whole_level"] = phase.seconds, phase.stages
            index = level["next_index"]
            self.result["levels"].append(level)
            self.result["summary"] = summary(self.result["levels"])
            self.save()
            log.info("c=%d: %.1f req/s, %.0f tok/s, latency p50 %.1f ms p99 %.1f ms, ttft p50 %.1f ms, tokens %s",
                     c, level.get("requests_per_s") or 0, level.get("output_tok_s") or 0,
                     level.get("latency_ms_p50") or 0, level.get("latency_ms_p99") or 0,
                     level.get("ttft_ms_p50") or 0, level.get("tokens_per_request"))
            log.info("c=%d: the gateway's ms by phase, p50 / p99: %s", c, ", ".join(
                f"{name} {v['p50']:.1f} / {v['p99']:.1f}" for name, v in level.get("gateway_timing_ms", {}).items()))


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # `timeout` (run_device.sh) sends SIGTERM: exit through `finally`, so the mesh stops, the JSON keeps the levels
    # measured and the checkpoint in /dev/shm is removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    Bench(parse_args(argv)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
