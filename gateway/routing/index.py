"""Which prefix-cache blocks one thinker replica holds, as its CacheEvents stream reports them, plus the blocks of
prompts this gateway just sent it (cached within a prefill, reported a moment later). A hybrid model's replica
(Qwen3.5) reuses them only up to a block whose state it kept: those are reported, and expected, too."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

PENDING_TTL_S = 30.0  # a sent prompt's blocks not reported by then were never stored (or already evicted)


class CacheIndex:
    def __init__(self, pending_ttl_s: float = PENDING_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._cached: set[bytes] = set()
        self._pending: dict[bytes, float] = {}  # key -> when we stop assuming it is cached
        self._states: set[bytes] = set()  # blocks whose state the replica kept (a hybrid model's)
        self._pending_states: dict[bytes, float] = {}
        self._ttl = pending_ttl_s
        self._clock = clock
        self._next_purge = 0.0
        self.block_size = 0  # tokens per block, from the replica's first report; 0: not heard from yet
        self.prefix_cache = False  # whether the replica reuses blocks at all
        self.needs_state = False  # whether a reused prefix must end at a block whose state was kept

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def apply(self, snapshot: bool, stored: Sequence[bytes], evicted: Sequence[bytes], block_size: int,
              prefix_cache: bool, needs_state: bool = False, states_stored: Sequence[bytes] = (),
              states_evicted: Sequence[bytes] = ()) -> None:
        """One CacheEvent: a snapshot replaces what we knew (a reconnect, a restarted replica); a delta updates it."""
        _apply(self._cached, self._pending, snapshot, stored, evicted)
        _apply(self._states, self._pending_states, snapshot, states_stored, states_evicted)
        self.block_size, self.prefix_cache, self.needs_state = block_size, prefix_cache, needs_state

    def forget(self) -> None:
        """The replica's stream broke: what it holds is unknown until its next snapshot."""
        for known in (self._cached, self._pending, self._states, self._pending_states):
            known.clear()
        self.block_size = 0

    def expect(self, keys: list[bytes]) -> None:
        """`keys`, a prompt's reusable blocks, were just sent to this replica: count them as cached until it reports
        them, or for the TTL; on a hybrid model the last one's state too (its engine keeps the state there)."""
        now = self._clock()
        if now >= self._next_purge:
            self._pending = {k: t for k, t in self._pending.items() if t > now}
            self._pending_states = {k: t for k, t in self._pending_states.items() if t > now}
            self._next_purge = now + 1.0
        until = now + self._ttl
        for key in keys:
            if key not in self._cached:
                self._pending[key] = until
        if self.needs_state and keys and keys[-1] not in self._states:
            self._pending_states[keys[-1]] = until

    def prefix_blocks(self, keys: list[bytes]) -> int:
        """How many leading blocks of `keys` the replica would reuse: up to its first miss (the engine stops there),
        and on a hybrid model only up to the deepest of those whose state it kept."""
        now = self._clock()
        n = reusable = 0
        for key in keys:
            if not _holds(self._cached, self._pending, key, now):
                break
            n += 1
            if not self.needs_state or _holds(self._states, self._pending_states, key, now):
                reusable = n
        return reusable


def _apply(known: set[bytes], pending: dict[bytes, float], snapshot: bool, stored: Sequence[bytes],
           evicted: Sequence[bytes]) -> None:
    if snapshot:
        known.clear()
        pending.clear()
    else:
        known.difference_update(evicted)
        for key in evicted:
            pending.pop(key, None)
    known.update(stored)
    for key in stored:
        pending.pop(key, None)


def _holds(known: set[bytes], pending: dict[bytes, float], key: bytes, now: float) -> bool:
    return key in known or pending.get(key, 0.0) > now
