"""`omnimesh bench`: against a running deployment with `--addr` (gateway/cli/remote_bench: any omnimesh gateway over
gRPC, or any OpenAI-compatible server over HTTP); otherwise the Thinker text->text benchmark of bench/thinker
(engine-only and through a gateway it starts).

The Thinker harness lives in the source tree's bench/ folder, not in the installed packages, so that mode works from
a checkout (including editable installs); its flags are read from bench/thinker/args.py, which imports no torch.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from gateway.cli.remote_bench.workloads import WORKLOADS

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "bench" / "thinker"
OWN_MESH_FLAGS = ("tiny", "random_weights", "model")  # the Thinker harness's: it starts its own mesh


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="closed-loop benchmark of a running deployment (--addr), or the Thinker "
                                     "text->text benchmark (needs a source checkout; --tiny runs on CPU)")
    args_file = HARNESS / "args.py"
    if args_file.exists():
        spec = importlib.util.spec_from_file_location("omnimesh_bench_args", args_file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.add_arguments(p)
    else:  # the flags --addr shares with the harness
        p.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
        p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16, 32], help="closed-loop levels")
        p.add_argument("--output-tokens", type=int, default=256, help="tokens per request (EOS ignored)")
        p.add_argument("--measured-per-stream", type=int, default=3, help="measured requests per concurrent stream")
        p.add_argument("--min-measured", type=int, default=6, help="fewest measured requests per level")
    remote = p.add_argument_group("a running deployment (--addr)")
    remote.add_argument("--addr", default=None, help="with --api grpc: a gateway's HOST:PORT; with --api openai: "
                                                     "HOST:PORT or the base URL (http://HOST:PORT/v1)")
    remote.add_argument("--api", choices=("grpc", "openai"), default="grpc",
                        help="grpc: omnimesh's API; openai: streaming chat completions (needs the openai package)")
    remote.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS),
                        help="what to send (a workload the deployment does not serve is skipped, with the reason)")
    remote.add_argument("--api-key", default=None, help="sent as `authorization: Bearer <key>`")
    remote.add_argument("--connections", type=int, default=1,
                        help="--api grpc: connections the requests take in turn (default 1), as that many clients "
                             "would open; a deployment of several gateway processes on one port spreads them")
    remote.add_argument("--model-name", default="", help="--api openai: the model to ask for (default: the first "
                                                         "the server lists)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.connections < 1:
        print(f"omnimesh bench: --connections {args.connections}: at least 1", file=sys.stderr)
        return 2
    if args.addr:
        clash = [f"--{f.replace('_', '-')}" for f in OWN_MESH_FLAGS if getattr(args, f, None)]
        if clash:
            print(f"omnimesh bench: --addr measures a running deployment; {' '.join(clash)} starts its own",
                  file=sys.stderr)
            return 2
        from gateway.cli.remote_bench.run import run as run_remote

        return run_remote(args)
    if not (HARNESS / "bench_thinker.py").exists():
        print(f"omnimesh bench: {HARNESS} not found; run it from a source checkout of omnimesh, or measure a "
              "running deployment with --addr", file=sys.stderr)
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
