"""`omnimesh info`: what a running mesh serves, and each stage's replica, build, device and limits."""
from __future__ import annotations

import argparse
import json
import sys

import grpc
from google.protobuf.json_format import MessageToDict

from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc
from gateway.cli.dial import add_tls_arguments, gateway_channel


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe a running mesh: its stages, builds, devices, limits and voices")
    p.add_argument("--addr", default="127.0.0.1:50051", help="gateway address (default 127.0.0.1:50051)")
    p.add_argument("--api-key", default=None, help="sent as `authorization: Bearer <key>`")
    add_tls_arguments(p)
    p.add_argument("--timeout", type=float, default=30.0, help="deadline in seconds (default 30)")
    p.add_argument("--json", action="store_true", help="the whole OmniInfo as one JSON object")
    p.set_defaults(run=run)


def describe(info: omni_pb2.OmniInfo) -> str:
    outputs = [omni_pb2.Modality.Name(m).removeprefix("MODALITY_").lower() for m in info.output_modalities]
    lines = [f"model: {info.gateway.model}" + (f" ({info.model_family})" if info.model_family else ""),
             f"in: {', '.join(info.input_modalities)}   out: {', '.join(outputs)}"
             + (f"   voices: {', '.join(info.voices)}" if info.voices else "")]
    for s in (info.gateway, *info.stages):
        lines.append(f"{s.stage:8} {s.replica or '-':14} {s.build:24} {s.device or '-'}")
        if s.limits:
            lines.append(" " * 9 + " ".join(f"{k}={v}" for k, v in sorted(s.limits.items())))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else None
    with gateway_channel(args) as channel:
        try:
            info = omni_pb2_grpc.OmniStub(channel).Info(common_pb2.InfoRequest(), metadata=metadata,
                                                         timeout=args.timeout)
        except grpc.RpcError as err:
            print(f"error: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    print(json.dumps(MessageToDict(info)) if args.json else describe(info))
    return 0
