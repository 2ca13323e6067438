"""The asyncio side of one request on an EngineLoop: its outputs as they arrive, commands to it, close to abort."""
from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from runtime.engine.engine_loop import EngineLoop

T = TypeVar("T")


class RequestStream(Generic[T]):
    """The outputs of one submitted request, read on the event loop that submitted it (one reader).

    Use as `async with`: leaving the block aborts an unfinished request. `next()` reads one output; `take()` reads
    every output that has arrived, so a reader that falls behind catches up in one go. An output that is an
    exception ends the stream: the read that reaches it raises it.
    """

    def __init__(self, key: int, request_id: str, engine: EngineLoop, loop: asyncio.AbstractEventLoop) -> None:
        self.key = key
        self.request_id = request_id
        self.loop = loop
        self._engine = engine
        self._items: deque[T | BaseException] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._hold_until: float | None = None  # while set, only an item at or past it (or the last) wakes the reader
        self._ended = False  # the final item has arrived (it may not have been read yet)
        self.finished = False  # the final item was read, or the stream was closed

    def push(self, item: T | BaseException, final: bool, now: float) -> None:
        """Called on `loop` with each output in order; `now` is the loop's clock. Nothing is taken after the final
        item (a failing engine may end a stream twice)."""
        if self._ended:
            return
        self._items.append(item)
        if final or isinstance(item, BaseException):
            self._ended = True
        if self._hold_until is None or self._ended or now >= self._hold_until:
            self._wake()

    def fail(self, error: BaseException) -> None:
        """Ends the stream with `error` from the asyncio side (its request's input broke); on `loop` only."""
        self.push(error, True, self.loop.time())

    def send(self, command: object) -> None:
        """A command of the stage's core for this request (more input, say); dropped once the stream ended."""
        if not self.finished:
            self._engine.command(command)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self, deadline: float | None, hold_until: float | None = None) -> None:
        """Until an item wakes us (see `push`) or the loop's clock passes `deadline`."""
        assert self._waiter is None, "a RequestStream has one reader"
        self._waiter = self.loop.create_future()
        self._hold_until = hold_until
        timer = None if deadline is None else self.loop.call_at(deadline, self._wake)
        try:
            await self._waiter
        finally:
            self._waiter = None
            self._hold_until = None
            if timer is not None:
                timer.cancel()

    async def next(self, timeout: float | None = None) -> T | None:
        """The next output, or None when `timeout` seconds pass first."""
        if not self._items and (timeout is None or timeout > 0):
            await self._wait(None if timeout is None else self.loop.time() + timeout)
        if not self._items:
            return None
        item = self._items.popleft()
        if isinstance(item, BaseException):
            self._raise(item)
        if self._ended and not self._items:
            self.finished = True
        return item  # type: ignore[return-value]

    async def take(self, hold_until: float | None = None, hold_grace: float = 0.0) -> list[T]:
        """Every output that has arrived, in order, after waiting for one if none has; an error among them is
        raised by the take that would return it first.

        With `hold_until` (the loop's clock), outputs are left to gather until the first one that arrives at or
        after that time, or the request's end. A step's outputs arrive together, so every stream due in a step
        wakes in the same pass of the loop, woken by the delivery rather than by a timer firing on its own; only a
        request that gets no outputs for a while (preempted) is ended by its timer, `hold_grace` seconds after
        `hold_until`.
        """
        if hold_until is not None and not self._ended and self.loop.time() < hold_until:
            await self._wait(hold_until + hold_grace, hold_until)
        while not self._items:
            await self._wait(None)
        if isinstance(self._items[0], BaseException):
            self._raise(self._items.popleft())  # type: ignore[arg-type]
        items: list[T] = []
        while self._items and not isinstance(self._items[0], BaseException):
            items.append(self._items.popleft())  # type: ignore[arg-type]
        if self._ended and not self._items:
            self.finished = True
        return items

    def _raise(self, error: BaseException) -> None:
        """The stream ends with `error`; the core is told in case the error came from this side (`fail`)."""
        self._items.clear()
        self.finished = True
        self._engine.abort(self.key)
        raise error

    async def __aenter__(self) -> RequestStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.finished:
            self.finished = True
            self._engine.abort(self.key)
