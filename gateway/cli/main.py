"""`omnimesh`: one entry point, a subcommand per job."""
from __future__ import annotations

import argparse
import os
import sys

from gateway.cli import bench, chat, demo, http, info, transcribe, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omnimesh", description="Qwen3-Omni as a gRPC mesh split by modality stage")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (up, chat, transcribe, info, http, demo, bench):
        module.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # `omnimesh chat --json ... | head`: the reader left; end quietly, as shell tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's exit flush would raise again
        return 1


if __name__ == "__main__":
    sys.exit(main())
