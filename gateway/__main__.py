"""`python -m gateway`: the public API process."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from runtime.config import STAGES, MeshConfig
from runtime.server import StageServer
from runtime.stage_auth import STAGE_TOKEN_ENV
from runtime.stage_main import run_stage, stage_arg_parser
from gateway.build import build_gateway


def with_flags(mesh: MeshConfig, args: argparse.Namespace, env_keys: tuple[str, ...],
               env_special_keys: tuple[str, ...] = ()) -> MeshConfig:
    """Stage addresses from --<stage>-addr (a stage given an address is enabled; a comma-separated --thinker-addr
    lists thinker replicas) and API keys from the environment."""
    for stage in STAGES:
        addr = getattr(args, f"{stage}_addr")
        if not addr:
            continue
        if stage == "thinker":  # the flag replaces the config's targets, whichever field held them
            targets = addr.split(",")
            fields = {"address": addr, "addresses": ()} if len(targets) == 1 else {"address": "",
                                                                                   "addresses": tuple(targets)}
            mesh = replace(mesh, thinker=replace(mesh.thinker, enabled=True, **fields))
        else:
            mesh = replace(mesh, **{stage: replace(mesh.stage(stage), address=addr, enabled=True)})
    if env_keys or env_special_keys:
        gw = mesh.gateway
        mesh = replace(mesh, gateway=replace(gw, api_keys=gw.api_keys + env_keys,
                                             special_token_api_keys=gw.special_token_api_keys + env_special_keys))
    return mesh


def main() -> None:
    parser = stage_arg_parser("gateway")
    for stage in STAGES:
        parser.add_argument(f"--{stage}-addr", help=f"{stage} target, e.g. 127.0.0.1:50052 or dns:///{stage}:50051"
                            + ("; thinker replicas: a headless Service's dns:/// name, or targets separated by commas"
                               if stage == "thinker" else ""))
    args, _ = parser.parse_known_args()
    # API keys and the stage token come from the environment (Kubernetes Secrets), read here at start, never at import.
    env_keys = tuple(k for k in os.environ.get("OMNIMESH_API_KEYS", "").split(",") if k)
    env_special = tuple(k for k in os.environ.get("OMNIMESH_SPECIAL_TOKEN_API_KEYS", "").split(",") if k)
    stage_token = os.environ.get(STAGE_TOKEN_ENV, "")

    async def build(mesh: MeshConfig, model_dir: Path, server: StageServer) -> Callable[[], None]:
        return await build_gateway(with_flags(mesh, args, env_keys, env_special), model_dir, server, stage_token)

    run_stage("gateway", build, parser=parser)


if __name__ == "__main__":
    main()
