"""Runs the HTTP front under uvicorn on a socket bound first (so `--port 0` works) and announces its port."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import socket
import sys

import uvicorn

from gateway.cli.dial import gateway_credentials
from runtime.logs import configure_logging
from runtime.server import READY_PREFIX
from http_front.app import create_app

log = logging.getLogger(__name__)


def serve(args: argparse.Namespace) -> int:
    configure_logging("http", args.log_level)
    credentials = gateway_credentials(args.gateway_tls, args.gateway_ca, "--gateway-ca")
    if args.gateway_connections < 1:
        print(f"error: --gateway-connections {args.gateway_connections}: at least 1", file=sys.stderr)
        return 1
    try:
        sock = listen_socket(args.host, args.port)
    except OSError as err:
        print(f"error: cannot listen on {args.host}:{args.port}: {err.strerror}", file=sys.stderr)
        return 1
    app = create_app(args.gateway_addr, args.served_model_name, args.timeout, credentials, args.gateway_connections)
    config = uvicorn.Config(app, log_level=args.log_level.lower(), access_log=args.log_level == "DEBUG",
                            timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)
    # uvicorn drains on SIGTERM/SIGINT, restores the handlers it found and raises the signal again: with these no-op
    # handlers found, a drained front exits 0, as every omnimesh process does.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    asyncio.run(_serve_and_announce(server, sock))
    return 0


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket (port 0: a free one) for uvicorn to serve on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say they are TCP, and with Nagle on, a
    # stream's second small write waited for the client's delayed ACK (+40 ms to the first token on a kept-alive
    # connection).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


async def _serve_and_announce(server: uvicorn.Server, sock: socket.socket) -> None:
    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        port = sock.getsockname()[1]
        log.info("serving the OpenAI API on http://%s:%d/v1", sock.getsockname()[0], port)
        sys.stdout.write(READY_PREFIX + json.dumps({"http_port": port}) + "\n")
        sys.stdout.flush()

    task = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        task.cancel()
