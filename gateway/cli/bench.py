"""`omnimesh bench`: the Thinker text->text benchmark of bench/thinker (engine-only and through the gateway).

The harness lives in the source tree's bench/ folder, not in the installed packages, so this subcommand works from
a checkout (including editable installs); its flags are read from bench/thinker/args.py, which imports no torch.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "bench" / "thinker"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="Thinker text->text benchmark: engine-only and through the gateway "
                                     "(needs a source checkout; --tiny runs on CPU)")
    args_file = HARNESS / "args.py"
    if args_file.exists():
        spec = importlib.util.spec_from_file_location("omnimesh_bench_args", args_file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not (HARNESS / "bench_thinker.py").exists():
        print(f"omnimesh bench: {HARNESS} not found; run it from a source checkout of omnimesh", file=sys.stderr)
        return 2
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # the harness imports itself as bench.thinker.*
    import logging

    from bench.thinker.bench_thinker import run_bench

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args.prog = "omnimesh bench"
    result = run_bench(args)
    print(json.dumps(result.get("summary", {}), indent=1))
    return 0
