"""Flags of the Thinker benchmark, shared by bench/thinker/bench_thinker.py and `omnimesh bench` (no torch here)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tiny", action="store_true", help="the demo checkpoint on CPU in fp32: a smoke test")
    which.add_argument("--random-weights", action="store_true",
                       help="real Thinker dims, random bf16 weights (no checkpoint needed; default off --tiny)")
    which.add_argument("--model", type=Path, help="a Qwen3-Omni checkpoint directory instead of random weights")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16, 32], help="closed-loop levels")
    p.add_argument("--routing", choices=("balanced", "native"), default="balanced",
                   help="balanced: prompts over the vocabulary's ordinary tokens and, on random weights, routers "
                        "and LM head calibrated (bench/thinker/balance.py); native: the earlier 40-word workload")
    p.add_argument("--prompt-tokens", type=int, default=32, help="prompt length after the chat template")
    p.add_argument("--output-tokens", type=int, default=256, help="tokens per request (EOS ignored)")
    p.add_argument("--sampling", choices=("greedy", "model"), default="greedy",
                   help="greedy (the comparable workload), or the model's default sampling, seeded per request")
    p.add_argument("--measured-per-stream", type=int, default=3,
                   help="measured requests per concurrent stream (at least --min-measured)")
    p.add_argument("--min-measured", type=int, default=6, help="fewest measured requests per level")
    p.add_argument("--long-prompt-tokens", type=int, default=1024, help="TTFT run at c=1 (0 skips it)")
    p.add_argument("--long-output-tokens", type=int, default=64)
    p.add_argument("--long-requests", type=int, default=5)
    p.add_argument("--modes", nargs="+", choices=["engine", "gateway"], default=["engine", "gateway"])
    p.add_argument("--skip-hf", action="store_true", help="skip the transformers generate baseline")
    p.add_argument("--hf-batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--hf-new-tokens", type=int, default=0, help="tokens per row for generate (0: --output-tokens)")
    p.add_argument("--max-num-seqs", type=int, default=0, help="engine rows per step (0: the largest concurrency)")
    p.add_argument("--max-batch-tokens", type=int, default=2048)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--kv-cache-gib", type=float, default=0.0, help="KV cache size (0: 16 GiB, 64 MiB with --tiny)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--decode-buckets", type=int, nargs="*", default=[], help="default: powers of two to max_num_seqs")
    p.add_argument("--prefill-buckets", type=int, nargs="*", default=[64, 128, 256, 512, 1024, 2048],
                   help="prefill token ladder (rungs above --max-batch-tokens are dropped)")
    p.add_argument("--no-graphs", action="store_true", help="eager steps only (to measure what graphs give)")
    p.add_argument("--think-ms", type=float, default=0.0,
                   help="each gateway-level client waits a uniform 0..this before each request (0: the next request "
                        "as the last one ends), so arrivals spread over the engine's steps")
    p.add_argument("--late-launch", action="store_true",
                   help="the gateway run's thinker with engine.late_launch (a step launched ahead waits until the "
                        "running one nearly ends, so arrivals join it)")
    p.add_argument("--ckpt-dir", type=Path, default=None,
                   help="where --random-weights writes its checkpoint for the gateway run (default: /dev/shm or tmp)")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds the mesh may take to come up")
    p.add_argument("--mesh-log-level", choices=("DEBUG", "INFO", "WARNING"), default="INFO",
                   help="the gateway run's mesh log (DEBUG: each request's timeline in the thinker and gateway)")


def command_line(prog: str, args: argparse.Namespace) -> str:
    """The flags that differ from their defaults, as a command to repeat the run (for the result file)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = vars(parser.parse_args(["--out", "-"]))
    words = [prog, "--out", str(args.out)]
    for action in parser._actions:
        name = action.dest
        if name in ("help", "out") or not hasattr(args, name) or getattr(args, name) == defaults.get(name):
            continue
        value = getattr(args, name)
        flag = action.option_strings[-1]
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return " ".join(words)
