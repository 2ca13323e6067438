"""WorkBudget: admits work up to its limit, refuses past it naming the config key (or, queued, makes it wait its turn
and refuses past max_waiting), always admits a request alone, and gives back what a request held however it ends."""
from __future__ import annotations

import asyncio

import pytest

from runtime.errors import ResourceExhausted
from runtime.work_budget import WorkBudget


def budget() -> WorkBudget:
    return WorkBudget("vision", "patches", 100, "vision.encoder.max_pending_size")


def test_work_is_admitted_up_to_the_limit_and_refused_past_it() -> None:
    b = budget()
    with b.hold(60), b.hold(40):
        assert b.held == 100
        with pytest.raises(ResourceExhausted, match=r"holds 100 patches .* brings 1, over its limit "
                                                     r"vision.encoder.max_pending_size=100; retry shortly"):
            with b.hold(1):
                pass
    assert b.held == 0


def test_a_request_alone_is_admitted_whatever_its_size() -> None:
    b = budget()
    with b.hold(250):
        assert b.held == 250
    assert b.held == 0


def test_a_request_that_fails_gives_back_what_it_held() -> None:
    b = budget()
    with pytest.raises(RuntimeError), b.hold(70):
        raise RuntimeError("the encoder failed")
    with b.hold(100):
        assert b.held == 100


# --- queued admission: the encoder stages wait their turn instead of refusing a burst (issue 18) ----------------

def queue(max_waiting: int = 8) -> WorkBudget:
    return WorkBudget("vision", "patches", 100, "vision.encoder.max_pending_size", max_waiting,
                      "vision.encoder.max_waiting")


async def _enter(b: WorkBudget, size: int, order: list[int], release: asyncio.Event) -> None:
    async with b.queued(size):
        order.append(size)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):  # a few loop turns: every task that can run has reached its next wait
        await asyncio.sleep(0)


def test_a_request_past_the_limit_waits_and_is_admitted_in_arrival_order() -> None:
    async def run() -> list[int]:
        b, order, events = queue(), [], [asyncio.Event() for _ in range(3)]
        tasks = [asyncio.create_task(_enter(b, size, order, ev)) for size, ev in zip((60, 70, 30), events)]
        await _settle()
        # 70 does not fit beside 60; 30 would, but waits behind 70 so a large request is never starved
        assert order == [60] and b.num_waiting == 2 and b.held == 60
        events[0].set()
        await _settle()
        assert order == [60, 70, 30] and b.held == 100 and b.num_waiting == 0
        events[1].set(), events[2].set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert b.held == 0
        return order

    assert asyncio.run(run()) == [60, 70, 30]


def test_past_max_waiting_a_request_is_refused_naming_both_limits() -> None:
    async def run() -> None:
        b, order, release = queue(max_waiting=1), [], asyncio.Event()
        tasks = [asyncio.create_task(_enter(b, 80, order, release)) for _ in range(2)]
        await _settle()
        assert b.num_waiting == 1
        with pytest.raises(ResourceExhausted, match=r"holds 80 patches of accepted work and this request brings 10, "
                                                    r"over its limit vision.encoder.max_pending_size=100, and 1 "
                                                    r"requests already wait their turn, its limit "
                                                    r"vision.encoder.max_waiting=1; retry shortly") as err:
            async with b.queued(10):
                pass
        assert err.value.retry_after_s == 1.0  # load: the client gets a RetryInfo
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert b.held == 0 and order == [80, 80]

    asyncio.run(run())


def test_without_a_queue_a_request_past_the_limit_is_refused_at_once() -> None:
    async def run() -> None:
        b, release = queue(max_waiting=0), asyncio.Event()
        task = asyncio.create_task(_enter(b, 80, [], release))
        await _settle()
        with pytest.raises(ResourceExhausted, match="vision.encoder.max_waiting=0"):
            async with b.queued(30):
                pass
        async with b.queued(20):  # one that fits is admitted
            assert b.held == 100
        release.set()
        await task

    asyncio.run(run())


def test_a_request_alone_is_admitted_at_once_whatever_its_size() -> None:
    async def run() -> None:
        b = queue(max_waiting=0)
        async with b.queued(250):
            assert b.held == 250
        assert b.held == 0

    asyncio.run(run())


def test_a_waiting_request_that_is_cancelled_leaves_the_queue_and_lets_the_next_in() -> None:
    async def run() -> None:
        b, order = queue(), []
        first, big, small = asyncio.Event(), asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_enter(b, 60, order, first))
        await _settle()
        waiting_big = asyncio.create_task(_enter(b, 70, order, big))
        waiting_small = asyncio.create_task(_enter(b, 30, order, small))
        await _settle()
        assert b.num_waiting == 2
        waiting_big.cancel()  # its caller went away (deadline, cancel): 30 now heads the queue and fits
        await _settle()
        assert order == [60, 30] and b.held == 90 and b.num_waiting == 0
        with pytest.raises(asyncio.CancelledError):
            await waiting_big
        first.set(), small.set()
        await asyncio.wait_for(asyncio.gather(holder, waiting_small), 5)
        assert b.held == 0

    asyncio.run(run())


def test_a_request_admitted_and_cancelled_before_it_resumed_gives_back_what_it_held() -> None:
    async def run() -> None:
        b, order = queue(), []
        async with b.queued(60):
            waiter = asyncio.create_task(_enter(b, 70, order, asyncio.Event()))
            await _settle()
        # leaving the block (no loop turn) admitted the waiter: 70 is held on its behalf, the waiter not resumed
        assert b.held == 70 and b.num_waiting == 0
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert b.held == 0 and order == []

    asyncio.run(run())


def test_a_failed_request_after_admission_gives_back_and_admits_the_next() -> None:
    async def run() -> None:
        b, order, release = queue(), [], asyncio.Event()

        async def failing() -> None:
            async with b.queued(60):
                await asyncio.sleep(0.01)
                raise RuntimeError("the encoder failed")

        bad = asyncio.create_task(failing())
        await _settle()
        waiter = asyncio.create_task(_enter(b, 70, order, release))
        with pytest.raises(RuntimeError):
            await bad
        await _settle()
        assert order == [70] and b.held == 70
        release.set()
        await waiter
        assert b.held == 0

    asyncio.run(run())
