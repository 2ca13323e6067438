"""What a thinker replica reports to routers: a snapshot, then net changes with its load, at a checked interval."""
from __future__ import annotations

import asyncio

import pytest

from runtime.engine.block_manager import BlockManager
from runtime.engine.cache_events import CacheEventLog
from runtime.engine.scheduler import Scheduler, SchedulerLimits
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
