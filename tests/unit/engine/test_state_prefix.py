"""The hybrid prefix cache: prefill chunks end at the prompt's last full block and leave a state snapshot there; a
later prompt with that prefix resumes from it (blocks and snapshot); least recently used snapshots go first; no
snapshot or an evicted block means no hit."""
from __future__ import annotations

import pytest

from runtime.engine.block_manager import BlockManager, prompt_block_keys
from runtime.engine.cache_events import CacheEventLog
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import ScheduledBatch, Scheduler, SchedulerLimits
from runtime.engine.sequence import Sequence
from runtime.engine.state_prefix import StatePrefixCache
from runtime.engine.state_slots import StateSlots
from tests.unit.engine.engine_fakes import make_seq
from tests.unit.engine.test_scheduler import step

SYSTEM = list(range(100, 118))  # 18 tokens: with a question the prompt's last full block of 4 ends at 16 or later


def seq(seq_id: int, prompt: list[int]) -> Sequence:
    return make_seq(prompt, SamplingOptions(temperature=0, max_tokens=1), seq_id=seq_id)


def make_scheduler(num_snapshots: int = 2, num_blocks: int = 64, events: CacheEventLog | None = None) -> Scheduler:
    blocks = BlockManager(num_blocks, 4, enable_prefix_cache=True)
    return Scheduler(SchedulerLimits(4, 64, 1000), blocks, StateSlots(4),
                     StatePrefixCache(num_snapshots, blocks, events=events))


def run(sched: Scheduler, s: Sequence) -> list[ScheduledBatch]:
    sched.add(s)
    batches = []
    while sched.has_work:
        batches.append(step(sched))
    return batches


def test_prefill_ends_at_the_last_full_block_and_snapshots_it() -> None:
    sched = make_scheduler()
    first = run(sched, seq(0, SYSTEM + [1, 2, 3]))  # 21 tokens: last reusable boundary at 20
    assert [(r.num_tokens, r.snapshot is not None) for b in first for r in b.rows] == [(20, True), (1, False)]
    snapshot = first[0].rows[0].snapshot
    second = seq(1, SYSTEM + [1, 2, 3, 9, 9])
    batches = run(sched, second)
    assert batches[0].rows[0].restore_from == snapshot.index
    assert second.num_cached_prompt_tokens == 20 and sched.num_prefix_hit_tokens == 20


def test_no_snapshot_at_a_boundary_means_no_hit_there() -> None:
    sched = make_scheduler()
    run(sched, seq(0, SYSTEM + [1, 2, 3]))  # snapshot at 20 only
    other = seq(1, SYSTEM + [7, 7, 7, 7])  # shares 16 tokens (blocks cached) but no snapshot at 16
    batches = run(sched, other)
    assert batches[0].rows[0].restore_from is None and other.num_cached_prompt_tokens == 0


def test_least_recently_used_snapshot_is_evicted() -> None:
    sched = make_scheduler(num_snapshots=1)
    run(sched, seq(0, SYSTEM + [1, 2, 3]))
    run(sched, seq(1, [5] * 21))  # takes the one snapshot
    again = seq(2, SYSTEM + [1, 2, 3, 4])
    run(sched, again)
    assert again.num_cached_prompt_tokens == 0


def test_evicted_blocks_fall_back_to_no_hit() -> None:
    sched = make_scheduler(num_blocks=7)  # 21 tokens take 6 blocks: the next prompt evicts the first one's
    run(sched, seq(0, SYSTEM + [1, 2, 3]))
    run(sched, seq(1, [5] * 21))
    again = seq(2, SYSTEM + [1, 2, 3, 4])
    batches = run(sched, again)
    assert batches[0].rows[0].restore_from is None and again.num_cached_prompt_tokens == 0


def test_refusals() -> None:
    with pytest.raises(ValueError, match="num_snapshots"):
        StatePrefixCache(0, BlockManager(8, 4))
    with pytest.raises(ValueError, match="enable_prefix_cache"):
        StatePrefixCache(2, BlockManager(8, 4, enable_prefix_cache=False))


def test_turn_ends_are_boundaries_too_so_another_question_reuses_the_system_prompt() -> None:
    blocks = BlockManager(64, 4, enable_prefix_cache=True)
    sched = Scheduler(SchedulerLimits(4, 64, 1000), blocks, StateSlots(4), StatePrefixCache(4, blocks, frozenset({7})))
    system = [100, 101, 102, 103, 104, 105, 106, 107, 108, 7]  # turn ends at 10: its block boundary is 8
    first = run(sched, seq(0, system + [1, 2, 3, 4, 5, 6, 8]))  # 17 tokens: last reusable boundary 16
    assert [r.num_tokens for b in first for r in b.rows] == [8, 8, 1]
    assert [r.snapshot is not None for b in first for r in b.rows] == [True, True, False]
    other = seq(1, system + [9, 9, 9, 9, 9, 9, 9])
    batches = run(sched, other)
    assert batches[0].rows[0].restore_from == first[0].rows[0].snapshot.index
    assert other.num_cached_prompt_tokens == 8


def test_the_blocks_whose_state_is_kept_are_logged_for_routers() -> None:
    """Named when the snapshot is bound, dropped when its slot is taken for another boundary; the same boundary
    snapshotted again is no change."""
    log = CacheEventLog()
    sched = make_scheduler(num_snapshots=1, events=log)
    first, other = SYSTEM + [1, 2, 3], [5] * 21
    run(sched, seq(0, first))
    kept = prompt_block_keys(first, (), 4)[-1]  # the block ending at token 20
    delta = log.read(None)
    assert delta.snapshot and delta.stored == [kept]
    run(sched, seq(1, other))  # takes the one snapshot
    changes = log.read(delta.cursor)
    assert changes.evicted == [kept] and changes.stored == [prompt_block_keys(other, (), 4)[-1]]
    run(sched, seq(2, other + [6]))  # resumes at the kept boundary (20); its own last full block is 20 too
    assert log.read(changes.cursor).stored == [] and log.read(changes.cursor).evicted == []
