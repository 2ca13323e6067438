"""The shared entry point of every stage process: flags, config, logging, model path, server start and drain."""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from runtime.config import MeshConfig, ServerConfig, load_mesh_config
from runtime.logs import configure_logging
from runtime.metrics import Metrics
from runtime.model_path import resolve_model
from runtime.server import StageServer, announce_ready
from runtime.stage_auth import STAGE_TOKEN_ENV

log = logging.getLogger(__name__)

# Called with everything a stage needs; it adds its servicers to the server and returns a cleanup callable.
StageBuilder = Callable[[MeshConfig, Path, StageServer], Awaitable[Callable[[], None]]]


def stage_arg_parser(stage: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {'gateway' if stage == 'gateway' else 'services.' + stage}",
                                description=f"omnimesh {stage} stage")
    p.add_argument("--config", type=Path, help="mesh YAML (see deploy/mesh.example.yaml)")
    p.add_argument("--model", help="checkpoint directory or 'demo' (overrides the config's model)")
    p.add_argument("--host", help="listen address (overrides the config)")
    p.add_argument("--port", type=int, help="gRPC port; 0 picks a free one")
    p.add_argument("--metrics-port", type=int, help="Prometheus port; 0 picks a free one, -1 disables")
    p.add_argument("--health-port", type=int, help="plaintext grpc.health.v1 port; 0 picks a free one, -1: none")
    p.add_argument("--replica", default=os.uname().nodename, help="replica name for metrics and logs")
    p.add_argument("--device", help="cpu, cuda or cuda:N (stages only)")
    p.add_argument("--dtype", help="float32, bfloat16 or float16 (stages only)")
    p.add_argument("--log-level", default="INFO")
    return p


def apply_flags(mesh: MeshConfig, stage: str, args: argparse.Namespace) -> tuple[MeshConfig, ServerConfig]:
    """The mesh config with this process's flags applied, and the server section this process listens with."""
    if args.model:
        mesh = replace(mesh, model=args.model)
    section = mesh.gateway if stage == "gateway" else mesh.stage(stage)
    server = section.server
    for name in ("host", "port", "metrics_port", "health_port"):
        value = getattr(args, name)
        if value is not None:
            server = replace(server, **{name: value})
    section = replace(section, server=server)
    if stage != "gateway":
        for flag in ("device", "dtype"):
            if getattr(args, flag):
                section = replace(section, **{flag: getattr(args, flag)})
    return replace(mesh, **{stage: section}), server


def run_stage(stage: str, builder: StageBuilder, argv: list[str] | None = None,
              parser: argparse.ArgumentParser | None = None) -> None:
    args = (parser or stage_arg_parser(stage)).parse_args(argv)
    configure_logging(stage, args.log_level)
    mesh, server_cfg = apply_flags(load_mesh_config(args.config), stage, args)
    # a stage refuses calls without the shared token; the gateway sends it (gateway/__main__.py) and takes API keys
    token = "" if stage == "gateway" else os.environ.get(STAGE_TOKEN_ENV, "")
    asyncio.run(_serve(stage, args.replica, mesh, server_cfg, builder, token))


async def _serve(stage: str, replica: str, mesh: MeshConfig, server_cfg: ServerConfig, builder: StageBuilder,
                 stage_token: str = "") -> None:
    metrics = Metrics(stage, replica, Path(mesh.model).name)
    # the gateway reads a public request up to twice its limit, to refuse one over it by name (request_decode.py)
    receive = 2 * server_cfg.max_message_bytes if stage == "gateway" else None
    server = StageServer(stage, replica, server_cfg, metrics, receive, stage_token)
    model_dir = resolve_model(mesh.model)
    cleanup = await builder(mesh, model_dir, server)
    # the loaded model's and loaders' objects live as long as the process: moved out of the collector's reach, a
    # full collection no longer walks them (a pause on the engine thread, mid-request)
    gc.freeze()
    try:
        ports = await server.start()
        announce_ready(ports)
        await server.serve_until_signal()
    finally:
        cleanup()
