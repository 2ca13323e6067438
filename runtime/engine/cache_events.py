"""The prefix cache's contents and changes as a log other threads read: what a replica tells routers (pure Python)."""
from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import NamedTuple


class CacheDelta(NamedTuple):
    """What a reader learns in one read. `snapshot`: `stored` is the whole cache, forget what you knew first;
    otherwise `stored` and `evicted` are the net changes since the reader's cursor (disjoint, so order is moot)."""

    snapshot: bool
    stored: list[bytes]
    evicted: list[bytes]
    cursor: int  # pass back to the next read


class CacheEventLog:
    """Block keys as the block manager names (stored) and recycles (evicted) them, for readers on other threads.

    The engine thread writes; any number of readers (one per router stream) each keep a cursor. The log keeps the
    last `capacity` changes: a reader that fell further behind, or reads for the first time, gets a snapshot of
    the keys cached now, taken under the same lock as the cursor so the two agree.
    """

    def __init__(self, capacity: int = 1 << 16) -> None:
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: the log must hold at least one change")
        self._lock = threading.Lock()
        self._cached: dict[bytes, None] = {}  # insertion-ordered set
        self._changes: deque[tuple[bytes, bool]] = deque(maxlen=capacity)  # (key, stored?)
        self._end = 0  # number of changes ever written: the cursor of a reader that has read them all

    def stored(self, key: bytes) -> None:
        with self._lock:
            self._cached[key] = None
            self._append(key, True)

    def evicted(self, key: bytes) -> None:
        with self._lock:
            self._cached.pop(key, None)
            self._append(key, False)

    def _append(self, key: bytes, stored: bool) -> None:
        self._changes.append((key, stored))
        self._end += 1

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def read(self, cursor: int | None) -> CacheDelta:
        """The changes since `cursor` (None: never read), or a snapshot when they are no longer all in the log."""
        with self._lock:
            first = self._end - len(self._changes)
            if cursor is None or cursor < first or cursor > self._end:
                return CacheDelta(True, list(self._cached), [], self._end)
            net: dict[bytes, bool] = {}
            for key, stored in itertools.islice(self._changes, cursor - first, None):
                net[key] = stored
            end = self._end
        return CacheDelta(False, [k for k, s in net.items() if s], [k for k, s in net.items() if not s], end)
