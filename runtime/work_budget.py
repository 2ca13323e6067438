"""`WorkBudget`: how much work a stage has accepted and not yet finished, and what happens to a request past a limit:
refused at once (`hold`), or queued for its turn (`queued`)."""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from runtime.errors import ResourceExhausted


class WorkBudget:
    """Work accepted and not finished (being received, queued or computed), in the stage's unit (patches, mel
    frames, bytes). A request is admitted on its `start` message, before any payload is read, so host memory never
    holds more than `limit` of payloads. A request alone is always admitted: the per-request limit bounds it.

    `hold` refuses a request past the limit with RESOURCE_EXHAUSTED (the gateway's own front door: its client sent
    one message and reads the refusal at once). `queued` makes it wait, first come first served, for the work ahead
    to finish, and refuses only past `max_waiting` waiting requests: an encoder stage is fed by gateways that have
    already decoded the media and admitted it against their own budget, so a burst they let through must be
    worked off, not bounced (a refusal of a 145 MB video stream while the gateway was still writing it reached the
    client as grpc's INTERNAL, issue 18). A waiting request's payload is not read, so it stays with its sender
    (HTTP/2 flow control) and costs this stage at most a stream's flow-control window. One event loop serves a
    stage, so no lock is needed."""

    def __init__(self, stage: str, unit: str, limit: int, config_key: str, max_waiting: int = 0,
                 waiting_key: str = "") -> None:
        self.stage, self.unit, self.limit, self.config_key = stage, unit, limit, config_key
        self.max_waiting, self.waiting_key = max_waiting, waiting_key
        self.held = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()  # (size, admitted), in arrival order

    @property
    def num_waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, size: int) -> bool:
        return not self.held or self.held + size <= self.limit

    @contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """Holds `size` for the body's duration (a request's reading, queueing, computing and streaming back)."""
        if not self._fits(size):
            raise ResourceExhausted(f"the {self.stage} stage holds {self.held} {self.unit} of accepted work and this "
                                    f"request brings {size}, over its limit {self.config_key}={self.limit}; retry "
                                    f"shortly, or add {self.stage} replicas")
        self.held += size
        try:
            yield
        finally:
            self._release(size)

    @asynccontextmanager
    async def queued(self, size: int) -> AsyncIterator[None]:
        """Holds `size` for the body's duration, first waiting (in arrival order) until it fits. A request that
        finds `max_waiting` others waiting is refused with RESOURCE_EXHAUSTED; one cancelled while it waits (its
        caller gone, its deadline passed) leaves the queue."""
        if self._waiters or not self._fits(size):  # behind those already waiting, so a large request is not starved
            if len(self._waiters) >= self.max_waiting:
                raise ResourceExhausted(
                    f"the {self.stage} stage holds {self.held} {self.unit} of accepted work and this request brings "
                    f"{size}, over its limit {self.config_key}={self.limit}, and {len(self._waiters)} requests "
                    f"already wait their turn, its limit {self.waiting_key}={self.max_waiting}; retry shortly, or "
                    f"add {self.stage} replicas")
            admitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (size, admitted)
            self._waiters.append(entry)
            try:
                await admitted
            except BaseException:
                if admitted.done() and not admitted.cancelled():  # admitted, then cancelled before it resumed
                    self._release(size)
                else:
                    if entry in self._waiters:  # _admit_waiting may have dropped it already
                        self._waiters.remove(entry)
                    self._admit_waiting()  # the one behind may fit where this one did not
                raise
        else:
            self.held += size
        try:
            yield
        finally:
            self._release(size)

    def _release(self, size: int) -> None:
        self.held -= size
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        """Admits waiting requests in order while the first of them fits; the size is held here, on its behalf."""
        while self._waiters:
            size, admitted = self._waiters[0]
            if admitted.done():  # cancelled, and its task has not yet resumed to take itself out
                self._waiters.popleft()
                continue
            if not self._fits(size):
                return
            self._waiters.popleft()
            self.held += size
            admitted.set_result(None)
