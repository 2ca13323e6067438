"""The prefix cache for hybrid models (pure Python): cached KV blocks are reusable only up to a block boundary where
a copy of the linear-attention state was kept, so the state is snapshotted at such boundaries and a new sequence
resumes from the deepest one whose blocks are all still cached.

Where: at the block boundary at or before each turn's end in the prompt (a `boundary_tokens` token, e.g.
<|im_end|>: what a repeated system prompt or a chat's later turns start with), and at the prompt's last full block
(a repeated prompt). A prefill chunk that would run past such a boundary is cut there, so the state after it exists
to be copied. Snapshots live in `num_snapshots` extra state slots of the runner, least recently used evicted first.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from runtime.engine.block_manager import BlockManager, block_key, iter_block_keys, media_salt, reusable_prompt_blocks
from runtime.engine.cache_events import CacheEventLog
from runtime.engine.sequence import Sequence


class Snapshot(NamedTuple):
    """After this step, copy the row's state into snapshot `index`, then name it `key` (its boundary block's key)."""

    index: int
    key: bytes


class StatePrefixCache:
    def __init__(self, num_snapshots: int, blocks: BlockManager, boundary_tokens: frozenset[int] = frozenset(),
                 events: CacheEventLog | None = None) -> None:
        """`events`, when given, logs the boundary blocks whose state is kept (stored when named, evicted when the
        name is dropped): a router needs them, since a cached block past the deepest of them is not reusable."""
        if num_snapshots < 1:
            raise ValueError(f"num_snapshots={num_snapshots}: the hybrid prefix cache needs at least one snapshot")
        if not blocks.enable_prefix_cache:
            raise ValueError("the hybrid prefix cache reuses cached KV blocks: enable_prefix_cache must be on")
        self.num_snapshots = num_snapshots
        self.blocks = blocks
        self.boundary_tokens = boundary_tokens
        self._lru: OrderedDict[int, bytes | None] = OrderedDict.fromkeys(range(num_snapshots))  # oldest first
        self._by_key: dict[bytes, int] = {}
        self.events = events

    def find(self, key: bytes) -> int | None:
        index = self._by_key.get(key)
        if index is not None:
            self._lru.move_to_end(index)
        return index

    def _reserve(self) -> int:
        """The least recently used snapshot, its old name dropped (its content is overwritten by this step)."""
        index, key = self._lru.popitem(last=False)
        if key is not None:
            del self._by_key[key]
            if self.events is not None:
                self.events.evicted(key)
        self._lru[index] = None
        return index

    def bind(self, snapshot: Snapshot) -> None:
        """Names a snapshot once the step that copies it has run (been launched: the copy is queued before any
        later step's read)."""
        old = self._by_key.get(snapshot.key)
        if old is not None and old != snapshot.index:
            self._lru[old] = None  # the same boundary twice: keep the newer copy
        elif old is None and self.events is not None:
            self.events.stored(snapshot.key)
        self._by_key[snapshot.key] = snapshot.index
        self._lru[snapshot.index] = snapshot.key
        self._lru.move_to_end(snapshot.index)

    def match(self, seq: Sequence) -> int | None:
        """At admission, in place of BlockManager.match_prefix: takes the cached blocks up to the deepest boundary
        that has a snapshot and returns that snapshot (the runner copies it into the sequence's slot), or None."""
        if not seq.allow_prefix_cache or seq.block_table:
            return None
        size = self.blocks.block_size
        limit = reusable_prompt_blocks(seq.num_tokens, size)
        keys = []
        for key in iter_block_keys(seq.token_ids(0, limit * size), seq.media_salts, size):
            if not self.blocks.is_cached(key):
                break
            keys.append(key)
        for depth in range(len(keys), 0, -1):
            index = self.find(keys[depth - 1])
            if index is not None:
                self.blocks.match_prefix(seq, max_blocks=depth)
                return index
        self.blocks.match_prefix(seq, max_blocks=0)
        return None

    def cut(self, seq: Sequence, num_tokens: int) -> tuple[int, Snapshot | None]:
        """A prefill chunk of `num_tokens` that would pass one of the prompt's snapshot boundaries not snapshotted
        yet ends on the first such, and the state there is snapshotted. Costs O(num_tokens): only this chunk's
        tokens are scanned and hashed."""
        if not seq.allow_prefix_cache:
            return num_tokens, None
        size = self.blocks.block_size
        start, end = seq.num_computed_tokens, seq.num_computed_tokens + num_tokens
        last = reusable_prompt_blocks(seq.num_prompt_tokens, size) * size
        turn_ends = {(i + 1) // size * size for i in range(start, min(end, seq.num_prompt_tokens))
                     if seq.prompt_ids[i] in self.boundary_tokens}
        for boundary in sorted(turn_ends | {last}):
            if start < boundary <= min(end, last):
                key = self._key_at(seq, boundary)
                if key not in self._by_key:
                    return boundary - start, Snapshot(self._reserve(), key)
        return num_tokens, None

    def _key_at(self, seq: Sequence, boundary: int) -> bytes:
        """The prefix-cache key of the block ending at `boundary`, chained on from the sequence's named blocks."""
        size, keys = self.blocks.block_size, seq.block_keys
        if boundary // size <= len(keys):
            return keys[boundary // size - 1]
        key = keys[-1] if keys else None
        for b in range(len(keys), boundary // size):
            lo, hi = b * size, (b + 1) * size
            key = block_key(key, seq.token_ids(lo, hi), media_salt(seq.media_salts, lo, hi))
        return key
