"""`omnimesh up`: every stage as its own process on this machine, supervised, behind one gateway."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from runtime.checkpoint.family import read_family
from runtime.config import MeshConfig, load_mesh_config, write_mesh_config
from runtime.logs import configure_logging
from runtime.model_path import resolve_model
from gateway.cli.supervisor import Child, StartFailed, Supervisor, dial_host, target

log = logging.getLogger(__name__)

MESH_PREFIX = "OMNIMESH_MESH "  # one machine-readable line with every process's ports, for scripts and tests

# Stage processes `up` knows how to start (all at once; the gateway after them, once their addresses are known).
STAGE_MODULES = {"vision": "services.vision", "audio": "services.audio", "talker": "services.talker",
                 "thinker": "services.thinker"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="start the whole mesh locally (each stage its own process)")
    p.add_argument("--model", default=None, help="checkpoint directory or 'demo' (default: the config's, 'demo')")
    p.add_argument("--port", type=int, default=None, help="gateway port (default 50051)")
    p.add_argument("--host", default=None, help="gateway listen address (default 127.0.0.1)")
    p.add_argument("--config", type=Path, default=None, help="mesh YAML (see deploy/mesh.example.yaml)")
    p.add_argument("--http-port", type=int, default=None,
                   help="also serve the OpenAI-compatible HTTP API on this port (0: a free one), on --host")
    p.add_argument("--ready-timeout", type=float, default=900.0, help="seconds a stage may take to load")
    p.add_argument("--exit-on-failure", action="store_true",
                   help="stop the mesh when a stage exits or reports NOT_SERVING (default: start it again with "
                        "backoff, as Kubernetes would)")
    p.add_argument("--log-level", default="INFO", type=str.upper,
                   choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="for `up` and every stage process")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging("up", args.log_level)
    try:
        return _up(args)
    except (FileNotFoundError, ValueError, StartFailed) as err:  # what the user can fix: said in one line
        log.debug("up failed", exc_info=True)  # the traceback, for --log-level DEBUG
        print(f"error: {err}", file=sys.stderr)
        return 1


def _up(args: argparse.Namespace) -> int:
    mesh = load_mesh_config(args.config)
    if args.model:
        mesh = replace(mesh, model=args.model)
    gw_server = mesh.gateway.server
    gw_server = replace(gw_server, port=args.port if args.port is not None else gw_server.port,
                        host=args.host or gw_server.host, share_port=mesh.gateway.replicas > 1)
    mesh = replace(mesh, gateway=replace(mesh.gateway, server=gw_server))
    model_dir = resolve_model(mesh.model)  # builds the demo checkpoint once, before any child needs it
    mesh = only_stages_of(mesh, model_dir)
    with tempfile.TemporaryDirectory(prefix="omnimesh-up-") as workdir:  # the resolved config, API keys included
        return _run_mesh(mesh, model_dir, Path(workdir), args)


def only_stages_of(mesh: MeshConfig, model_dir: Path) -> MeshConfig:
    """Stages the checkpoint's model has no use for are not started (Qwen3-ASR: audio and thinker only); the
    gateway then answers their inputs and outputs UNIMPLEMENTED."""
    family = read_family(model_dir)
    for stage in STAGE_MODULES:
        if stage not in family.stages and mesh.stage(stage).enabled:
            log.info("%s: not started, %s (%s) has no use for it", stage, model_dir, family.family)
            mesh = replace(mesh, **{stage: replace(mesh.stage(stage), enabled=False)})
    return mesh


def stage_processes(mesh: MeshConfig, stage: str, module: str, common: list[str]
                    ) -> list[tuple[str, str, list[str]]]:  # fmt: skip
    """(name, module, args) of each process of `stage`: one, or with thinker.replicas N, N thinkers named
    thinker-<i>, each on its device from thinker.devices."""
    flags = [*common, "--port", "0", "--metrics-port", "0"]
    if stage != "thinker":
        return [(stage, module, [*flags, "--replica", f"{stage}-0"])]
    thinker = mesh.thinker
    names = ["thinker"] if thinker.replicas == 1 else [f"thinker-{i}" for i in range(thinker.replicas)]
    return [(name, module, [*flags, "--replica", f"thinker-{i}", "--device", thinker.replica_device(i)])
            for i, name in enumerate(names)]


def with_addresses(mesh: MeshConfig, addresses: dict[str, list[str]]) -> MeshConfig:
    """Each stage's address as started; the thinker's replicas as its address list (in replica order, as
    `start_together` returns them)."""
    for stage, targets in addresses.items():
        if stage == "thinker" and mesh.thinker.replicas > 1:
            mesh = replace(mesh, thinker=replace(mesh.thinker, address="", addresses=tuple(targets)))
        else:
            mesh = replace(mesh, **{stage: replace(mesh.stage(stage), address=targets[0])})
    return mesh


def start_gateways(sup: Supervisor, replicas: int, common: list[str], ready_timeout_s: float, host: str) -> Child:
    """The gateway, or with gateway.replicas N, N of them on its one port (gateway-<i>), each with a health port of
    its own for the supervisor's probes; the first binds the port (a free one for 0) and the rest join it."""
    if replicas == 1:
        return sup.start("gateway", "gateway", [*common, "--replica", "gateway-0"], ready_timeout_s, host=host)
    own_health = ["--health-port", "0"]
    first = sup.start("gateway-0", "gateway", [*common, "--replica", "gateway-0", *own_health], ready_timeout_s,
                      host=host)
    sup.start_together([(f"gateway-{i}", "gateway", [*common, "--replica", f"gateway-{i}", "--port",
                                                     str(first.grpc_port), *own_health]) for i in range(1, replicas)],
                       ready_timeout_s, host=host)
    return first


def _run_mesh(mesh: MeshConfig, model_dir: Path, workdir: Path, args: argparse.Namespace) -> int:
    gw_server = mesh.gateway.server
    sup = Supervisor("127.0.0.1")
    config_path = workdir / "mesh.yaml"
    write_mesh_config(mesh, config_path)
    common = ["--config", str(config_path), "--model", str(model_dir), "--log-level", args.log_level]
    try:
        stages = [spec for stage, module in STAGE_MODULES.items() if mesh.stage(stage).enabled
                  for spec in stage_processes(mesh, stage, module, common)]
        addresses: dict[str, list[str]] = {}
        for child in sup.start_together(stages, args.ready_timeout):
            addresses.setdefault(child.name.split("-")[0], []).append(f"127.0.0.1:{child.grpc_port}")
        mesh = with_addresses(mesh, addresses)
        write_mesh_config(mesh, config_path)
        gateway = start_gateways(sup, mesh.gateway.replicas, common, args.ready_timeout, gw_server.host)
        if args.http_port is not None:
            gw_addr = target(dial_host(gw_server.host), gateway.grpc_port)
            # the kernel hands each connection to one gateway replica: with 8 a replica, the odds that one of N
            # serves none are N (1 - 1/N)^(8N) < N e^-8
            connections = 1 if mesh.gateway.replicas == 1 else 8 * mesh.gateway.replicas
            sup.start("http", "http_front", ["--gateway-addr", gw_addr, "--host", gw_server.host, "--port",
                                             str(args.http_port), "--log-level", args.log_level,
                                             "--gateway-connections", str(connections)],
                      args.ready_timeout, host=gw_server.host)
    except BaseException:
        sup.stop_all()
        raise
    print(f"omnimesh is up on {gw_server.host}:{gateway.grpc_port} (model {mesh.model})", flush=True)
    for child in sup.children:
        if child.http_port:
            print(f"  {child.name:8s} http://{gw_server.host}:{child.http_port}/v1  (OpenAI API)", flush=True)
            continue
        print(f"  {child.name:8s} grpc 127.0.0.1:{child.grpc_port}  metrics :{child.metrics_port}/metrics", flush=True)
    print("try: .venv/bin/omnimesh chat \"Hello\"   (Ctrl-C stops every stage)", flush=True)
    print(MESH_PREFIX + json.dumps({c.name: {"grpc_port": c.grpc_port, "metrics_port": c.metrics_port,
                                             "pid": c.process.pid} | ({"http_port": c.http_port} if c.http_port else {})
                                    for c in sup.children}), flush=True)
    return sup.wait(restart=not args.exit_on_failure)
