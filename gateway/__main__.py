"""`python -m gateway`: the public API process."""
from __future__ import annotations

import os
from dataclasses import replace

from runtime.stage_main import run_stage, stage_arg_parser
from gateway.build import build_gateway


def main() -> None:
    parser = stage_arg_parser("gateway")
    parser.add_argument("--thinker-addr", help="thinker target, e.g. 127.0.0.1:50052 (overrides thinker.address)")
    args, _ = parser.parse_known_args()
    # API keys come from the environment (a Kubernetes Secret), read here at start, never at import.
    env_keys = tuple(k for k in os.environ.get("OMNIMESH_API_KEYS", "").split(",") if k)

    async def build(mesh, model_dir, server):
        if args.thinker_addr:
            mesh = replace(mesh, thinker=replace(mesh.thinker, address=args.thinker_addr))
        if env_keys:
            mesh = replace(mesh, gateway=replace(mesh.gateway, api_keys=mesh.gateway.api_keys + env_keys))
        return await build_gateway(mesh, model_dir, server)

    run_stage("gateway", build, parser=parser)


if __name__ == "__main__":
    main()
