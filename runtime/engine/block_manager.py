"""Paged KV cache bookkeeping: which blocks each sequence owns, and the prefix cache over full blocks (pure Python)."""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator

from runtime.engine.cache_events import CacheEventLog
from runtime.engine.sequence import Sequence

MediaSalts = tuple[tuple[int, int, str], ...]  # (start, end, content hash) of each media span of a prompt


def block_key(prev: bytes | None, token_ids: list[int], salt: str) -> bytes:
    """Content key of a full block: its tokens, the media content they stand for, and everything before it."""
    h = hashlib.blake2b(digest_size=16)
    h.update(prev or b"")
    h.update(",".join(map(str, token_ids)).encode())
    h.update(salt.encode())
    return h.digest()


def media_salt(media_salts: MediaSalts, lo: int, hi: int) -> str:
    """The content hashes of the media spans that overlap tokens [lo, hi): same ids, other pixels, other KV."""
    return "|".join(h for start, end, h in media_salts if start < hi and end > lo)


def iter_block_keys(token_ids: list[int], media_salts: MediaSalts, block_size: int) -> Iterator[bytes]:
    """The key of each full block of `token_ids`, in order (each one chains every block before it)."""
    key = None
    for lo in range(0, len(token_ids) - block_size + 1, block_size):
        key = block_key(key, token_ids[lo:lo + block_size], media_salt(media_salts, lo, lo + block_size))
        yield key


def reusable_prompt_blocks(num_tokens: int, block_size: int) -> int:
    """How many leading full blocks of a prompt `match_prefix` may reuse: one token is always left to compute."""
    return (num_tokens - 1) // block_size


def prompt_block_keys(token_ids: list[int], media_salts: MediaSalts, block_size: int) -> list[bytes]:
    """The keys `match_prefix` looks up for a new prompt: what a router hashes to find a replica's cached prefix."""
    return list(iter_block_keys(token_ids[:reusable_prompt_blocks(len(token_ids), block_size) * block_size],
                                media_salts, block_size))


class BlockManager:
    """Fixed-size KV blocks with reference counts. A sequence holds ceil(computed tokens / block_size) blocks.

    Full blocks are named by `block_key`, so a new sequence whose prompt starts with the same tokens (and the same
    media) reuses their KV instead of recomputing it. Freed blocks keep their content until they are handed out
    again, oldest first, so a finished conversation's prefix stays reusable while memory allows. `events`, when
    given, hears every key named and every key recycled (what routers learn of this cache).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_cache: bool = True,
                 events: CacheEventLog | None = None) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks}: the KV cache needs at least one block")
        if block_size < 1:
            raise ValueError(f"block_size={block_size}: a block holds at least one token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_cache = enable_prefix_cache
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # ref 0, oldest first
        self._refs = [0] * num_blocks
        self._key_of: list[bytes | None] = [None] * num_blocks
        self._by_key: dict[bytes, int] = {}
        self.events = events

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage_ratio(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = -(-(seq.num_computed_tokens + num_new_tokens) // self.block_size)
        return max(0, total - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= len(self._free)

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Gives `seq` the blocks that `num_new_tokens` more computed tokens need."""
        need = self.blocks_needed(seq, num_new_tokens)
        if need > len(self._free):
            raise RuntimeError(f"{seq} needs {need} blocks, {len(self._free)} free: call can_grow first")
        for _ in range(need):
            seq.block_table.append(self._take_free())

    def _take_free(self) -> int:
        block, _ = self._free.popitem(last=False)
        key = self._key_of[block]
        if key is not None:  # evict the oldest cached content
            del self._by_key[key]
            self._key_of[block] = None
            if self.events is not None:
                self.events.evicted(key)
        self._refs[block] = 1
        return block

    def free(self, seq: Sequence) -> None:
        """Drops `seq`'s hold on every block at once (finish, abort, preemption)."""
        for block in seq.block_table:
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None
        seq.block_table = []
        seq.block_keys = []

    def is_cached(self, key: bytes) -> bool:
        return key in self._by_key

    def match_prefix(self, seq: Sequence, max_blocks: int | None = None) -> int:
        """At admission: takes the cached blocks that match the start of `seq` (at most `max_blocks`: a hybrid
        model's state exists only at some boundaries); returns the tokens they cover.

        At least one token is always left to compute, since the step that computes it samples the next token.
        """
        if not (self.enable_prefix_cache and seq.allow_prefix_cache) or seq.block_table:
            return 0
        limit = reusable_prompt_blocks(seq.num_tokens, self.block_size)
        if max_blocks is not None:
            limit = min(limit, max_blocks)
        for key in iter_block_keys(seq.token_ids(0, limit * self.block_size), seq.media_salts, self.block_size):
            block = self._by_key.get(key)
            if block is None:
                break
            if self._refs[block] == 0:
                del self._free[block]
            self._refs[block] += 1
            seq.block_table.append(block)
            seq.block_keys.append(key)
        hit = len(seq.block_table) * self.block_size
        seq.num_computed_tokens = hit
        if seq.num_preemptions == 0:  # a recompute finding its own blocks is not what the client's prompt hit
            seq.num_cached_prompt_tokens = min(hit, seq.num_prompt_tokens)
        return hit

    def commit(self, seq: Sequence) -> None:
        """Names the blocks of `seq` that became full, so later sequences can reuse them."""
        if not self.enable_prefix_cache:
            return
        for b in range(len(seq.block_keys), seq.num_computed_tokens // self.block_size):
            prev = seq.block_keys[-1] if seq.block_keys else None
            key = block_key(prev, seq.token_ids(b * self.block_size, (b + 1) * self.block_size), self._salt(seq, b))
            seq.block_keys.append(key)
            block = seq.block_table[b]
            if key not in self._by_key and self._key_of[block] is None:
                self._by_key[key] = block
                self._key_of[block] = key
                if self.events is not None:
                    self.events.stored(key)

    def _salt(self, seq: Sequence, b: int) -> str:
        return media_salt(seq.media_salts, b * self.block_size, (b + 1) * self.block_size)

    def slot(self, seq: Sequence, token_index: int) -> int:
        """Flat cache slot of the token at `token_index` of `seq`."""
        block = seq.block_table[token_index // self.block_size]
        return block * self.block_size + token_index % self.block_size
