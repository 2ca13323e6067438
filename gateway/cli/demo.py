"""`omnimesh demo-checkpoint`: writes a tiny random checkpoint (Qwen3-Omni, Qwen3-ASR or Qwen3.5, dense or --moe)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEMO_MODELS = ("qwen3-omni", "qwen3-omni-thinking", "qwen3-omni-captioner", "qwen3-asr", "qwen3.5")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo-checkpoint",
                       help="write a tiny randomly initialised Qwen3-Omni, Qwen3-ASR or Qwen3.5 in HF format")
    p.add_argument("--model", choices=DEMO_MODELS, default="qwen3-omni",
                   help="which model (thinking / captioner: Omni without a talker; qwen3-asr: its -hf layout; "
                        "qwen3.5: the hybrid Gated-DeltaNet VLM)")
    p.add_argument("--moe", action="store_true", help="qwen3.5 only: the MoE variant (qwen3_5_moe)")
    p.add_argument("--out", type=Path, required=True, help="directory to write")
    p.add_argument("--seed", type=int, default=0, help="weights seed (same seed, same bytes)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.moe and args.model != "qwen3.5":
        print(f"omnimesh demo-checkpoint: --moe applies to --model qwen3.5 only, not {args.model}", file=sys.stderr)
        return 2
    if args.model == "qwen3.5":
        from runtime.checkpoint.qwen3_5.demo import build_qwen3_5_demo_checkpoint

        path = build_qwen3_5_demo_checkpoint(args.out, seed=args.seed, moe=args.moe)
    elif args.model == "qwen3-asr":
        from runtime.checkpoint.asr.demo import build_asr_demo_checkpoint

        path = build_asr_demo_checkpoint(args.out, seed=args.seed)
    else:
        from runtime.checkpoint.demo import build_demo_checkpoint

        variant = args.model.removeprefix("qwen3-omni").removeprefix("-") or "instruct"
        path = build_demo_checkpoint(args.out, seed=args.seed, variant=variant)
    print(path)
    return 0
