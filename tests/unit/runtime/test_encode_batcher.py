"""EncodeBatcher: concurrent submits share one encoder call within the size budget; errors, cancels, timings."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from runtime.encode_batcher import BatchStats, EncodeBatcher


class FakeEncoder:
    """Records each batch; items are ints, their size is their value, results are their doubles."""

    def __init__(self, fail_on: int | None = None, gate: threading.Event | None = None) -> None:
        self.batches: list[list[int]] = []
        self.fail_on = fail_on
        self.gate = gate

    def __call__(self, items: Sequence[int]) -> list[int]:
        if self.gate is not None:
            self.gate.wait(5)
        self.batches.append(list(items))
        if self.fail_on in items:
            raise RuntimeError("encoder failed")
        return [2 * i for i in items]


def make(encoder: FakeEncoder, budget: int = 10, wait: float = 0.05, **hooks: object) -> EncodeBatcher[int, int]:
    return EncodeBatcher(encoder, size_of=lambda i: i, max_batch_size=budget, max_wait_s=wait, **hooks)


def test_concurrent_items_share_one_call() -> None:
    async def scenario() -> None:
        encoder = FakeEncoder()
        batcher = make(encoder)
        results = await asyncio.gather(*(batcher.submit(i) for i in (1, 2, 3)))
        await batcher.stop()
        assert results == [2, 4, 6] and encoder.batches == [[1, 2, 3]]

    asyncio.run(scenario())


def test_budget_splits_batches_and_keeps_order() -> None:
    async def scenario() -> None:
        encoder = FakeEncoder()
        batcher = make(encoder, budget=5)
        results = await asyncio.gather(*(batcher.submit(i) for i in (3, 2, 4, 9)))
        await batcher.stop()
        assert results == [6, 4, 8, 18]
        assert encoder.batches == [[3, 2], [4], [9]]  # 9 is over budget alone and still runs

    asyncio.run(scenario())


def test_an_item_that_queued_behind_a_forward_does_not_wait_again() -> None:
    """max_wait_s counts from the first item's arrival: item 1 arrives while item 2's forward runs (held 0.6 s by
    the gate), so its 0.5 s wait is over when that forward ends and its batch starts at once, not 0.5 s later."""
    async def scenario() -> None:
        gate = threading.Event()
        encoder = FakeEncoder(gate=gate)
        batcher = make(encoder, wait=0.5, budget=2)
        full = asyncio.ensure_future(batcher.submit_timed(2))  # fills the budget: runs at once
        await asyncio.sleep(0.05)
        behind = asyncio.ensure_future(batcher.submit_timed(1))  # room for one more: would wait for company
        await asyncio.sleep(0.55)
        gate.set()
        t_full, t_behind = await full, await behind
        await batcher.stop()
        assert encoder.batches == [[2], [1]] and t_behind.batch_index == 1
        assert t_full.queue_seconds < 0.3
        # ~0.55 s behind the forward; a wait counted from the forward's end would make it ~1.05 s
        assert 0.4 < t_behind.queue_seconds < 0.85, t_behind

    asyncio.run(scenario())


def test_a_lone_item_skips_the_wait_while_items_come_far_apart() -> None:
    """Items 0.5 s apart with a 0.2 s wait: the first (no gap known) waits for company, those after start at once;
    items that come together still share a call, and a burst's second item waits for the rest."""
    async def scenario() -> None:
        encoder = FakeEncoder()
        batcher = make(encoder, wait=0.2)
        first = await batcher.submit_timed(1)
        assert 0.15 < first.queue_seconds < 0.5 and batcher.last_gap is None  # waited for company
        for i in (2, 3):
            await asyncio.sleep(0.5)
            assert (await batcher.submit_timed(i)).queue_seconds < 0.1
        assert await asyncio.gather(*(batcher.submit(i) for i in (1, 2, 3))) == [2, 4, 6]
        assert encoder.batches[-1] == [1, 2, 3]  # queued in one loop turn: taken together without a wait
        await asyncio.sleep(0.5)
        lone = asyncio.ensure_future(batcher.submit_timed(1))  # after a quiet spell: starts at once, alone
        await asyncio.sleep(0.02)
        second = asyncio.ensure_future(batcher.submit_timed(2))  # 0.02 s later: waits for company
        await asyncio.sleep(0.05)
        third = asyncio.ensure_future(batcher.submit_timed(3))
        t_lone, t_second, t_third = await lone, await second, await third
        assert t_lone.queue_seconds < 0.1 and encoder.batches[-2:] == [[1], [2, 3]], encoder.batches
        assert t_second.batch_index == t_third.batch_index == t_lone.batch_index + 1
        await batcher.stop()

    asyncio.run(scenario())


def test_encoder_error_reaches_every_caller_of_the_batch() -> None:
    async def scenario() -> None:
        encoder = FakeEncoder(fail_on=2)
        batcher = make(encoder)
        outcomes = await asyncio.gather(*(batcher.submit(i) for i in (1, 2)), return_exceptions=True)
        assert all(isinstance(o, RuntimeError) for o in outcomes)
        assert await batcher.submit(3) == 6  # the batcher survives
        await batcher.stop()

    asyncio.run(scenario())


def test_only_an_error_is_fatal_names_is_kept_as_fatal() -> None:
    def device_lost(items: Sequence[int]) -> list[int]:
        raise RuntimeError("device lost")

    async def scenario() -> tuple[object, object]:
        batcher = make(FakeEncoder(fail_on=2), is_fatal=lambda err: "device" in str(err))
        with pytest.raises(RuntimeError):
            await batcher.submit(2)
        recoverable = batcher.fatal_error
        batcher.encode = device_lost
        with pytest.raises(RuntimeError, match="device lost"):
            await batcher.submit(1)
        await batcher.stop()
        return recoverable, batcher.fatal_error

    recoverable, fatal = asyncio.run(scenario())
    assert recoverable is None and str(fatal) == "device lost"


def test_cancelled_caller_is_dropped() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        encoder = FakeEncoder(gate=gate)
        batcher = make(encoder, budget=1, wait=0.0)
        first = asyncio.create_task(batcher.submit(1))  # occupies the encoder until the gate opens
        await asyncio.sleep(0.05)
        doomed = asyncio.create_task(batcher.submit(1))
        await asyncio.sleep(0.01)
        doomed.cancel()
        gate.set()
        assert await first == 2
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert await batcher.submit(1) == 2
        await batcher.stop()
        assert encoder.batches == [[1], [1]]

    asyncio.run(scenario())


def test_timings_batch_index_and_observers() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        stats: list[BatchStats] = []
        depths: list[int] = []
        batcher = make(FakeEncoder(gate=gate), budget=3, wait=0.0, on_batch=stats.append, on_depth=depths.append)
        first = asyncio.create_task(batcher.submit_timed(3))  # holds the encoder until the gate opens
        await asyncio.sleep(0.05)
        rest = [asyncio.create_task(batcher.submit_timed(i)) for i in (1, 2)]
        await asyncio.sleep(0.05)
        assert batcher.num_waiting == 2
        gate.set()
        a, b, c = await first, *(await asyncio.gather(*rest))
        await batcher.stop()
        assert (a.result, b.result, c.result) == (6, 2, 4)
        assert a.batch_index == 0 and b.batch_index == c.batch_index == 1
        assert b.queue_seconds >= 0.05 > a.queue_seconds  # 1 and 2 waited while 3 held the encoder
        assert a.compute_seconds >= 0.05 and b.compute_seconds == c.compute_seconds
        assert [(s.num_items, s.size) for s in stats] == [(1, 3), (2, 3)]
        assert stats[1].queue_seconds == (b.queue_seconds, c.queue_seconds)
        assert max(depths) == 2 and depths[-1] == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "kwargs,needle", [({"max_batch_size": 0}, "max_batch_size"), ({"max_wait_s": -1.0}, "max_wait_s")]
)
def test_bad_settings(kwargs: dict, needle: str) -> None:
    settings = {"max_batch_size": 10, "max_wait_s": 0.0, **kwargs}
    with pytest.raises(ValueError, match=needle):
        EncodeBatcher(FakeEncoder(), size_of=lambda i: i, **settings)


def test_submit_in_order_yields_in_order_and_times_the_request() -> None:
    import asyncio

    from runtime.encode_batcher import EncodeBatcher, request_timings

    async def main() -> tuple[list[int], tuple[float, float]]:
        batcher = EncodeBatcher(lambda items: [i * 10 for i in items], size_of=lambda i: 1, max_batch_size=2,
                                max_wait_s=0.01)
        timed = [t async for t in batcher.submit_in_order([1, 2, 3])]
        batcher.close()
        return [t.result for t in timed], request_timings(timed)

    results, (queue, compute) = asyncio.run(main())
    assert results == [10, 20, 30]
    assert queue >= 0 and compute >= 0
