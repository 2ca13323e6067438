"""`Heartbeat`: whether a compute thread is stuck inside one iteration (a hung device never returns or raises)."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Heartbeat:
    """Marks the start and end of each iteration of an engine or encoder thread. `stuck(limit_s)` names an iteration
    that has run longer than `limit_s`: a GPU that hangs (an Xid error, a deadlocked kernel) leaves the thread waiting
    forever with no exception, so without this the stage would stay SERVING while every request hangs."""

    def __init__(self) -> None:
        self._since: float | None = None  # when the running iteration began; None between iterations

    @contextmanager
    def beat(self) -> Iterator[None]:
        self._since = time.monotonic()
        try:
            yield
        finally:
            self._since = None

    def stuck(self, limit_s: float) -> BaseException | None:
        since = self._since  # read once: the thread may end the iteration meanwhile
        if limit_s <= 0 or since is None or time.monotonic() - since <= limit_s:
            return None
        return TimeoutError(f"one iteration has run for {time.monotonic() - since:.0f} s, over stall_timeout_s="
                            f"{limit_s:g}: the device may be hung")
