"""The CLI's channel to a gateway: plaintext, or TLS with --tls (the system's trust roots, or --ca's)."""
from __future__ import annotations

import argparse
from pathlib import Path

import grpc

from runtime.channels import channel_options


def add_tls_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls", action="store_true", help="dial the gateway over TLS")
    p.add_argument("--ca", type=Path, default=None, help="PEM file of the CA that signed the gateway's certificate "
                                                         "(implies --tls; default: the system's trust roots)")


def gateway_channel(args: argparse.Namespace) -> grpc.Channel:
    if not (args.tls or args.ca):
        return grpc.insecure_channel(args.addr, options=channel_options())
    try:
        roots = args.ca.read_bytes() if args.ca else None
    except OSError as err:
        raise SystemExit(f"error: --ca {args.ca}: {err.strerror}") from None
    return grpc.secure_channel(args.addr, grpc.ssl_channel_credentials(roots), options=channel_options())
