"""`omnimesh demo-checkpoint`: writes the tiny random Qwen3-Omni checkpoint."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo-checkpoint", help="write a tiny randomly initialised Qwen3-Omni in HF format")
    p.add_argument("--out", type=Path, required=True, help="directory to write")
    p.add_argument("--seed", type=int, default=0, help="weights seed (same seed, same bytes)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from runtime.checkpoint.demo import build_demo_checkpoint

    path = build_demo_checkpoint(args.out, seed=args.seed)
    print(path)
    return 0
