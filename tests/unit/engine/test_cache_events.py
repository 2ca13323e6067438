"""The prefix cache's event log: what a router reads of a replica's cache, through stores, evictions and lag."""
from __future__ import annotations

import pytest

from runtime.engine.block_manager import BlockManager, prompt_block_keys
from runtime.engine.cache_events import CacheEventLog
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sequence import Sequence

BS = 4


def computed(bm: BlockManager, i: int, ids: list[int], salts: tuple = ()) -> Sequence:
    s = Sequence(i, f"r{i}", ids, SamplingOptions(temperature=0, max_tokens=8), media_salts=salts)
    bm.match_prefix(s)
    n = s.num_uncomputed_tokens
    bm.grow(s, n)
    s.num_computed_tokens += n
    bm.commit(s)
    return s


def test_first_read_is_a_snapshot_then_deltas() -> None:
    log = CacheEventLog()
    bm = BlockManager(4, BS, events=log)
    a = computed(bm, 0, list(range(9)))  # two full blocks named
    first = log.read(None)
    assert first.snapshot and first.stored == a.block_keys and first.evicted == []
    assert log.read(first.cursor) == (False, [], [], first.cursor)
    a_keys = a.block_keys
    bm.free(a)
    b = computed(bm, 1, [50 + t for t in range(12)])  # takes the never-named block, then a's two named ones
    delta = log.read(first.cursor)
    assert not delta.snapshot
    assert delta.evicted == a_keys and delta.stored == b.block_keys and len(b.block_keys) == 3
    assert log.num_cached == 3 and log.read(None).stored == b.block_keys


def test_router_keys_equal_the_engines_keys_media_included() -> None:
    """A router hashing a prompt with prompt_block_keys finds exactly the blocks the engine named for it."""
    log = CacheEventLog()
    bm = BlockManager(16, BS, events=log)
    ids, salts = [1, 7, 7, 7, 7, 2, 3, 4, 5, 6], ((1, 5, "cat"),)
    computed(bm, 0, ids, salts)
    cached = set(log.read(None).stored)
    assert prompt_block_keys(ids + [9], salts, BS) == log.read(None).stored
    assert cached.isdisjoint(prompt_block_keys(ids + [9], ((1, 5, "dog"),), BS)[:1])
    assert prompt_block_keys(ids[:8], salts, BS) == log.read(None).stored[:1]  # the last token is never reused


def test_store_then_evict_within_one_read_nets_out() -> None:
    log = CacheEventLog()
    start = log.read(None).cursor
    log.stored(b"a")
    log.evicted(b"a")
    log.stored(b"b")
    log.evicted(b"c")
    log.stored(b"c")
    delta = log.read(start)
    assert delta == (False, [b"b", b"c"], [b"a"], 5)


def test_a_reader_that_fell_behind_the_log_gets_a_snapshot() -> None:
    log = CacheEventLog(capacity=2)
    start = log.read(None).cursor
    for key in (b"a", b"b", b"c"):
        log.stored(key)
    log.evicted(b"a")
    delta = log.read(start)
    assert delta.snapshot and delta.stored == [b"b", b"c"] and delta.cursor == 4
    assert log.read(99).snapshot  # a cursor from another life of the process (restart) is no cursor
    with pytest.raises(ValueError, match="capacity=0"):
        CacheEventLog(capacity=0)
