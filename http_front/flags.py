"""The HTTP front's command-line flags, shared by `python -m http_front` and `omnimesh http`."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gateway-addr", default="127.0.0.1:50051", help="gateway gRPC address (default 127.0.0.1:50051)")
    p.add_argument("--gateway-tls", action="store_true", help="dial the gateway over TLS")
    p.add_argument("--gateway-ca", type=Path, default=None,
                   help="PEM file of the CA that signed the gateway's certificate (implies --gateway-tls; default: "
                        "the system's trust roots)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000; 0 picks a free one)")
    p.add_argument("--served-model-name", default="",
                   help="model id in /v1/models and answers (default: the checkpoint's directory name)")
    p.add_argument("--timeout", type=float, default=None, help="deadline of each gateway call, in seconds")
    p.add_argument("--gateway-connections", type=int, default=1,
                   help="connections to the gateway, taken in turn by the calls (default 1); gateway processes that "
                        "share one port (gateway.replicas) each serve the connections the kernel hands them")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"))
