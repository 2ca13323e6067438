"""The prefix cache: full blocks named by content (tokens, media, everything before) are shared, then evicted."""
from __future__ import annotations

from runtime.engine.block_manager import BlockManager
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import Scheduler, SchedulerLimits
from runtime.engine.sequence import FinishReason, Sequence

BS = 4


def seq(i: int, ids: list[int], **kw) -> Sequence:
    return Sequence(i, f"r{i}", ids, SamplingOptions(temperature=0, max_tokens=8), **kw)


def compute_all(bm: BlockManager, s: Sequence) -> None:
    """What the scheduler does for a sequence's whole prompt: grow, compute, name the full blocks."""
    n = s.num_uncomputed_tokens
    bm.grow(s, n)
    s.num_computed_tokens += n
    bm.commit(s)


def test_second_prompt_reuses_full_blocks_and_leaves_one_token() -> None:
    bm = BlockManager(16, BS)
    a = seq(0, list(range(10)))
    assert bm.match_prefix(a) == 0
    compute_all(bm, a)
    b = seq(1, list(range(10)) + [99])
    assert bm.match_prefix(b) == 8  # two full blocks; the third was never full
    assert b.block_table == a.block_table[:2]
    c = seq(2, list(range(8)))  # prompt is exactly two blocks: the last must be recomputed to sample
    assert bm.match_prefix(c) == 4
    assert c.num_computed_tokens == 4 and c.num_cached_prompt_tokens == 4


def test_different_media_content_never_matches() -> None:
    bm = BlockManager(16, BS)
    ids = [1, 7, 7, 7, 7, 2, 3, 4, 5]
    a = seq(0, ids, media_salts=((1, 5, "cat"),))
    compute_all(bm, a)
    assert bm.match_prefix(seq(1, ids, media_salts=((1, 5, "dog"),))) == 0
    assert bm.match_prefix(seq(2, ids, media_salts=((1, 5, "cat"),))) == 8


def test_shared_block_returns_to_free_only_when_every_holder_is_done() -> None:
    bm = BlockManager(4, BS)
    a = seq(0, list(range(9)))
    compute_all(bm, a)
    b = seq(1, list(range(9)))
    bm.match_prefix(b)
    free_before = bm.num_free_blocks
    bm.free(a)
    assert bm.num_free_blocks == free_before + 1  # only a's private last block
    bm.free(b)
    assert bm.num_free_blocks == 4


def test_freed_cached_blocks_are_evicted_oldest_first_when_memory_is_needed() -> None:
    bm = BlockManager(3, BS)
    a = seq(0, list(range(9)))
    compute_all(bm, a)
    bm.free(a)
    big = seq(1, [50 + i for i in range(12)])
    assert bm.match_prefix(big) == 0
    compute_all(bm, big)  # takes all three blocks, evicting a's content
    bm.free(big)
    assert bm.match_prefix(seq(2, list(range(9)))) == 0


def test_opted_out_sequence_neither_looks_up_nor_matches() -> None:
    bm = BlockManager(8, BS)
    a = seq(0, list(range(9)))
    compute_all(bm, a)
    assert bm.match_prefix(seq(1, list(range(9)), allow_prefix_cache=False)) == 0
    assert BlockManager(8, BS, enable_prefix_cache=False).match_prefix(seq(2, list(range(9)))) == 0


def test_scheduler_admits_with_hits_and_counts_them() -> None:
    sched = Scheduler(SchedulerLimits(4, 64, 128), BlockManager(32, BS))
    first = seq(0, list(range(13)))
    sched.add(first)
    batch = sched.schedule()
    sched.postprocess(batch, {0: 500})
    sched.finish(first, FinishReason.STOP)
    second = seq(1, list(range(13)))
    sched.add(second)
    batch = sched.schedule()
    assert [(r.seq.seq_id, r.num_tokens) for r in batch.rows] == [(1, 1)]
    assert batch.rows[0].samples
    assert (sched.num_prefix_queried_tokens, sched.num_prefix_hit_tokens) == (26, 12)
    assert second.num_cached_prompt_tokens == 12


def test_waiting_sequence_that_cannot_grow_releases_its_matches() -> None:
    sched = Scheduler(SchedulerLimits(4, 64, 128), BlockManager(3, BS))
    a = seq(0, list(range(9)))
    sched.add(a)
    sched.postprocess(sched.schedule(), {0: 1})
    sched.finish(a, FinishReason.STOP)  # its three blocks are free, two of them cached
    late = seq(1, list(range(9)) + list(range(100, 110)))  # matches 8 tokens, then needs 3 more blocks
    sched.add(late)
    assert sched.schedule().is_empty
    assert late.block_table == [] and late.num_computed_tokens == 0
    assert sched.blocks.num_free_blocks == 3
