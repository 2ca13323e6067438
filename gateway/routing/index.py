"""Which prefix-cache blocks one thinker replica holds, as its CacheEvents stream reports them, plus the blocks of
prompts this gateway just sent it (cached within a prefill, reported a moment later)."""
from __future__ import annotations

import time
from collections.abc import Callable

PENDING_TTL_S = 30.0  # a sent prompt's blocks not reported by then were never stored (or already evicted)


class CacheIndex:
    def __init__(self, pending_ttl_s: float = PENDING_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._cached: set[bytes] = set()
        self._pending: dict[bytes, float] = {}  # key -> when we stop assuming it is cached
        self._ttl = pending_ttl_s
        self._clock = clock
        self._next_purge = 0.0
        self.block_size = 0  # tokens per block, from the replica's first report; 0: not heard from yet
        self.prefix_cache = False  # whether the replica reuses blocks at all

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def apply(self, snapshot: bool, stored: list[bytes], evicted: list[bytes], block_size: int,
              prefix_cache: bool) -> None:
        """One CacheEvent: a snapshot replaces what we knew (a reconnect, a restarted replica); a delta updates it."""
        if snapshot:
            self._cached = set(stored)
            self._pending.clear()
        else:
            self._cached.difference_update(evicted)
            self._cached.update(stored)
            for key in evicted:
                self._pending.pop(key, None)
        for key in stored:
            self._pending.pop(key, None)
        self.block_size, self.prefix_cache = block_size, prefix_cache

    def forget(self) -> None:
        """The replica's stream broke: what it holds is unknown until its next snapshot."""
        self._cached.clear()
        self._pending.clear()
        self.block_size = 0

    def expect(self, keys: list[bytes]) -> None:
        """`keys` were just sent to this replica: count them as cached until it reports them, or for the TTL."""
        now = self._clock()
        if now >= self._next_purge:
            self._pending = {k: t for k, t in self._pending.items() if t > now}
            self._next_purge = now + 1.0
        until = now + self._ttl
        for key in keys:
            if key not in self._cached:
                self._pending[key] = until

    def prefix_blocks(self, keys: list[bytes]) -> int:
        """How many leading blocks of `keys` the replica holds (the engine reuses a prefix up to its first miss)."""
        now = self._clock()
        n = 0
        for key in keys:
            if key not in self._cached and self._pending.get(key, 0.0) <= now:
                break
            n += 1
        return n
