"""What a thinker replica reports to routers: a snapshot, then net changes with its load, at a checked interval."""
from __future__ import annotations

import asyncio

import pytest

from runtime.engine.block_manager import BlockManager
from runtime.engine.cache_events import CacheEventLog
from runtime.engine.scheduler import Scheduler, SchedulerLimits
from runtime.engine.state_prefix import StatePrefixCache
from runtime.engine.state_slots import StateSlots
from runtime.errors import InvalidArgument
from services.thinker.cache_report import CacheReporter, report_interval_s
from services.thinker.wire import cache_event_to_pb


def test_interval_bounds() -> None:
    assert report_interval_s(0) == 0.1 and report_interval_s(10) == 0.01 and report_interval_s(10_000) == 10.0
    for bad in (9, 10_001):
        with pytest.raises(InvalidArgument) as err:
            report_interval_s(bad)
        assert err.value.violations[0].field == "interval_ms"
        assert "use 10 to 10000 milliseconds, or 0 for 100" in str(err.value)


def test_reports_start_with_a_snapshot_then_changes_with_the_load() -> None:
    log = CacheEventLog()
    scheduler = Scheduler(SchedulerLimits(4, 64, 64), BlockManager(8, 16, events=log))
    log.stored(b"k" * 16)

    async def two() -> list:
        reports = CacheReporter(scheduler).reports(0.01)
        first = await anext(reports)
        log.evicted(b"k" * 16)
        second = await anext(reports)
        await reports.aclose()
        return [first, second]

    first, second = asyncio.run(two())
    assert first.delta.snapshot and first.delta.stored == [b"k" * 16] and first.block_size == 16
    assert not second.delta.snapshot and second.delta.evicted == [b"k" * 16]
    msg = cache_event_to_pb(second)
    assert (msg.snapshot, list(msg.evicted), msg.block_size, msg.prefix_cache) == (False, [b"k" * 16], 16, True)
    assert (msg.load.running, msg.load.waiting, msg.load.kv_usage) == (0, 0, 0.0)


def test_a_block_manager_without_an_event_log_cannot_report() -> None:
    with pytest.raises(ValueError, match="without a CacheEventLog"):
        CacheReporter(Scheduler(SchedulerLimits(4, 64, 64), BlockManager(8, 16)))


def test_reports_end_once_the_server_drains() -> None:
    """Else an idle router's stream alone would hold a draining replica for its whole grace period."""
    draining = [False]
    scheduler = Scheduler(SchedulerLimits(4, 64, 64), BlockManager(8, 16, events=CacheEventLog()))

    async def count() -> int:
        n = 0
        async for _ in CacheReporter(scheduler, lambda: draining[0]).reports(0.01):
            n += 1
            draining[0] = n == 3
        return n

    assert asyncio.run(asyncio.wait_for(count(), 5)) == 3


def hybrid_scheduler(block_log: CacheEventLog, state_log: CacheEventLog | None) -> Scheduler:
    blocks = BlockManager(8, 16, events=block_log)
    return Scheduler(SchedulerLimits(4, 64, 64), blocks, StateSlots(4), StatePrefixCache(2, blocks, events=state_log))


def test_a_hybrid_replica_reports_the_blocks_whose_state_it_kept_and_both_start_over_together() -> None:
    blocks, states = CacheEventLog(), CacheEventLog(capacity=2)
    a, b, c, d = (bytes([i]) * 16 for i in range(4))
    blocks.stored(a)
    states.stored(a)

    async def three() -> list:
        reports = CacheReporter(hybrid_scheduler(blocks, states)).reports(0.01)
        first = await anext(reports)
        blocks.stored(b)
        states.evicted(a)
        second = await anext(reports)
        for key in (b, c, d):  # more state changes than its log keeps: the reader fell behind
            states.stored(key)
        third = await anext(reports)
        await reports.aclose()
        return [first, second, third]

    first, second, third = asyncio.run(three())
    assert first.delta.snapshot and first.states.snapshot and first.states.stored == [a]
    assert not second.delta.snapshot and second.delta.stored == [b] and second.states.evicted == [a]
    assert third.states.snapshot and third.delta.snapshot  # one snapshot flag on the wire: both start over
    assert third.delta.stored == [a, b] and third.states.stored == [b, c, d]
    msg = cache_event_to_pb(second)
    assert msg.needs_state and list(msg.states_evicted) == [a] and list(msg.states_stored) == []
    plain = cache_event_to_pb(asyncio.run(anext(CacheReporter(
        Scheduler(SchedulerLimits(4, 64, 64), BlockManager(8, 16, events=CacheEventLog()))).reports(0.01))))
    assert not plain.needs_state and not plain.states_stored


def test_a_hybrid_prefix_cache_without_a_state_log_cannot_report() -> None:
    with pytest.raises(ValueError, match="StatePrefixCache was built without a CacheEventLog"):
        CacheReporter(hybrid_scheduler(CacheEventLog(), None))
