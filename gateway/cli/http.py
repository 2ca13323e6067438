"""`omnimesh http`: the OpenAI-compatible HTTP front alone, in front of a running gateway."""
from __future__ import annotations

import argparse

from http_front.flags import add_arguments


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("http", help="serve the OpenAI-compatible HTTP API in front of a running gateway")
    add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from http_front.server import serve  # the ASGI stack only for this subcommand

    return serve(args)
