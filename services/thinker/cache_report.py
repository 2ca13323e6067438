"""What a thinker replica tells routers: its prefix cache's changes and its load, every interval (no protobuf)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from runtime.engine.cache_events import CacheDelta, CacheEventLog
from runtime.engine.scheduler import Scheduler
from runtime.errors import InvalidArgument

DEFAULT_INTERVAL_MS = 100
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 10, 10_000


@dataclass(frozen=True)
class ReplicaLoad:
    running: int
    waiting: int
    kv_usage: float


@dataclass(frozen=True)
class CacheReport:
    delta: CacheDelta
    load: ReplicaLoad
    block_size: int
    prefix_cache: bool
    # a hybrid model's boundary blocks whose state is kept (None: a model that needs none); a snapshot when `delta`
    # is one, so the receiver forgets both together
    states: CacheDelta | None = None


def report_interval_s(interval_ms: int) -> float:
    """The interval a CacheEvents call asked for, in seconds (0: the default)."""
    if interval_ms == 0:
        return DEFAULT_INTERVAL_MS / 1000
    if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
        raise InvalidArgument("interval_ms", f"is {interval_ms}; use {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS} "
                              f"milliseconds, or 0 for {DEFAULT_INTERVAL_MS}")
    return interval_ms / 1000


class CacheReporter:
    """Reads the engine's cache event log and scheduler (written by the engine thread) for any number of streams.

    `draining`: true once the server drains; the streams then end, or they alone would hold its shutdown for the
    whole grace period (they never finish on their own)."""

    def __init__(self, scheduler: Scheduler, draining: Callable[[], bool] = lambda: False) -> None:
        if scheduler.blocks.events is None:
            raise ValueError("the scheduler's BlockManager was built without a CacheEventLog (events=)")
        if scheduler.state_prefix is not None and scheduler.state_prefix.events is None:
            raise ValueError("the scheduler's StatePrefixCache was built without a CacheEventLog (events=)")
        self._events: CacheEventLog = scheduler.blocks.events
        self._scheduler = scheduler
        self._draining = draining

    def load(self) -> ReplicaLoad:
        s = self._scheduler
        return ReplicaLoad(len(s.running), len(s.waiting), s.blocks.usage_ratio)

    async def reports(self, interval_s: float) -> AsyncIterator[CacheReport]:
        """A snapshot first, then the net changes of each interval, each with the load at that moment; until the
        server drains."""
        blocks = self._scheduler.blocks
        state_log = None if self._scheduler.state_prefix is None else self._scheduler.state_prefix.events
        cursor = state_cursor = None
        while not self._draining():
            delta = self._events.read(cursor)
            states = None
            if state_log is not None:
                states = state_log.read(None if delta.snapshot else state_cursor)
                if states.snapshot and not delta.snapshot:  # fell behind the state log: both start over
                    delta = self._events.read(None)
                state_cursor = states.cursor
            cursor = delta.cursor
            yield CacheReport(delta, self.load(), blocks.block_size, blocks.enable_prefix_cache, states)
            await asyncio.sleep(interval_s)
