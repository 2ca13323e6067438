"""The gateway's index of one replica's prefix cache: reports, evictions, snapshots after a restart, and what the
gateway just sent it."""
from __future__ import annotations

from gateway.routing.index import CacheIndex

K = [bytes([i]) * 16 for i in range(6)]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reported_blocks_count_up_to_the_first_miss() -> None:
    idx = CacheIndex()
    assert idx.prefix_blocks(K) == 0 and idx.block_size == 0
    idx.apply(True, [K[0], K[1], K[3]], [], 16, True)
    assert idx.prefix_blocks(K) == 2 and idx.block_size == 16 and idx.prefix_cache
    idx.apply(False, [K[2]], [], 16, True)
    assert idx.prefix_blocks(K) == 4
    idx.apply(False, [], [K[1]], 16, True)  # an evicted middle block cuts the reusable prefix there
    assert idx.prefix_blocks(K) == 1 and idx.num_cached == 3


def test_a_snapshot_replaces_everything_known_as_after_a_restart() -> None:
    idx = CacheIndex()
    idx.apply(True, K[:4], [], 16, True)
    idx.expect(K[4:])
    idx.apply(True, [], [], 16, True)  # the replica restarted: an empty cache, and nothing we sent survives
    assert idx.prefix_blocks(K) == 0 and idx.num_cached == 0
    idx.apply(True, K[:2], [], 16, True)
    idx.forget()  # its stream broke: unknown until the next snapshot
    assert idx.prefix_blocks(K) == 0 and idx.block_size == 0


def test_sent_blocks_count_until_reported_or_expired() -> None:
    clock = Clock()
    idx = CacheIndex(pending_ttl_s=5.0, clock=clock)
    idx.apply(True, [K[0]], [], 16, True)
    idx.expect(K[:3])
    assert idx.prefix_blocks(K) == 3
    idx.apply(False, [], [K[2]], 16, True)  # reported evicted before it was ever reported stored
    assert idx.prefix_blocks(K) == 2
    clock.now += 6.0  # K[1] never reported: it was not stored after all
    assert idx.prefix_blocks(K) == 1
    idx.expect(K[1:2])
    idx.apply(False, [K[1]], [], 16, True)  # confirmed: no longer subject to the TTL
    clock.now += 60.0
    assert idx.prefix_blocks(K) == 2


def test_a_hybrid_replica_reuses_a_prefix_only_up_to_a_block_whose_state_it_kept() -> None:
    clock = Clock()
    idx = CacheIndex(pending_ttl_s=5.0, clock=clock)
    idx.apply(True, K[:5], [], 16, True, needs_state=True, states_stored=[K[1], K[3]])
    assert idx.prefix_blocks(K) == 4 and idx.prefix_blocks(K[:3]) == 2  # the deepest kept state within the prefix
    idx.apply(False, [], [], 16, True, True, states_evicted=[K[3]])
    assert idx.prefix_blocks(K) == 2
    idx.apply(False, [], [K[1]], 16, True, True)  # the block is gone: its kept state no longer helps
    assert idx.prefix_blocks(K) == 0
    idx.expect(K[:6])  # sent a prompt: its blocks, and the state at its last one, count until reported
    assert idx.prefix_blocks(K) == 6
    clock.now += 6.0
    assert idx.prefix_blocks(K) == 0
    idx.apply(True, K[:4], [], 16, True, True, [K[2]])
    idx.forget()
    idx.apply(True, K[:4], [], 16, True, True)  # its states are forgotten with the blocks
    assert idx.prefix_blocks(K) == 0
    idx.apply(True, K[:4], [], 16, True, needs_state=False)  # an attention model: every cached block counts
    assert idx.prefix_blocks(K) == 4
