"""A client that hangs up while the front waits on the mesh for an answer it has not begun to send: the wait is
cancelled, and with it the gateway call, so the mesh stops generating for nobody. A streamed answer needs none of
this once it has begun (its response listens for the hang-up); before it, and for a whole answer, nothing else would
notice one: a non-streamed chat whose client timed out at 0.5 s went on generating its 400 tokens."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import suppress
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")

CLIENT_CLOSED_REQUEST = 499  # nginx's status for it: in the access log only, as nobody is left to read it


class ClientGone(Exception):
    """The client closed its connection before its answer was ready."""


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, or ClientGone (with `work` cancelled) if the client disconnects first. The request's body
    must have been read: the next message is then the disconnect, whenever it comes."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():  # the client left, or this request was cancelled itself
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientGone
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
