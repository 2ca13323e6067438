"""The front's listening socket: accepted connections send small writes at once (Nagle off)."""
from __future__ import annotations

import asyncio
import socket

from http_front.server import listen_socket


def test_accepted_connections_have_nagle_off() -> None:
    async def scenario() -> int:
        sock = listen_socket("127.0.0.1", 0)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("socket")
            accepted.set_result(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        nodelay = await asyncio.wait_for(accepted, 5)
        writer.close()
        server.close()
        await server.wait_closed()
        return nodelay

    assert asyncio.run(scenario()) != 0
