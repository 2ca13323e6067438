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


def gateway_credentials(tls: bool, ca: Path | None, flag: str = "--ca") -> grpc.ChannelCredentials | None:
    """None for plaintext; else TLS trusting `ca` (a PEM file) or the system's roots. Read now: a bad path exits."""
    if not (tls or ca):
        return None
    try:
        return grpc.ssl_channel_credentials(ca.read_bytes() if ca else None)
    except OSError as err:
        raise SystemExit(f"error: {flag} {ca}: {err.strerror}") from None


def gateway_channel(args: argparse.Namespace) -> grpc.Channel:
    credentials = gateway_credentials(args.tls, args.ca)
    if credentials is None:
        return grpc.insecure_channel(args.addr, options=channel_options())
    return grpc.secure_channel(args.addr, credentials, options=channel_options())
