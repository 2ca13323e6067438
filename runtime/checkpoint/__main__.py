"""`python -m runtime.checkpoint OUT_DIR [--seed N]`: writes the demo checkpoint from the command line."""
from __future__ import annotations

import argparse
from pathlib import Path

from runtime.checkpoint.demo import build_demo_checkpoint


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a tiny random Qwen3-Omni checkpoint in HF format.")
    parser.add_argument("out_dir", type=Path, help="directory to write (created if missing)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed; same seed, same bytes")
    args = parser.parse_args(argv)
    print(build_demo_checkpoint(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
