"""SequenceStream and AsyncEngine delivery: take() gathers, holds until a step past the deadline, one post per step."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from runtime.engine.async_engine import AsyncEngine, SequenceStream
from runtime.engine.block_manager import BlockManager
from runtime.engine.engine import Engine, StepStats, TokenEvent
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import Scheduler, SchedulerLimits
from runtime.engine.sequence import FinishReason
from tests.unit.engine.engine_fakes import make_seq
from tests.unit.engine.test_engine import SlowRunner, collect

LONG = SamplingOptions(temperature=0.0, max_tokens=10_000, ignore_eos=True)


class AbortLog:
    """Stands in for the AsyncEngine behind a stream: records aborts."""

    def __init__(self) -> None:
        self.aborted: list[int] = []

    def abort(self, seq_id: int) -> None:
        self.aborted.append(seq_id)


def run(test: Callable[[SequenceStream, AbortLog], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        log = AbortLog()
        stream = SequenceStream(make_seq([1, 2]), log, asyncio.get_running_loop())  # type: ignore[arg-type]
        return await test(stream, log)

    return asyncio.run(main())


def token(stream: SequenceStream, t: int, finish: FinishReason | None = None) -> TokenEvent:
    return TokenEvent(stream.seq, t, finish_reason=finish)


def test_take_returns_every_event_that_arrived_in_order() -> None:
    async def body(stream: SequenceStream, _: AbortLog) -> list[list[int]]:
        now = stream.loop.time()
        for t in (5, 6, 7):
            stream.push(token(stream, t), now)
        first = await stream.take()
        reader = asyncio.create_task(stream.take())
        await asyncio.sleep(0.01)
        assert not reader.done(), "take() must wait while nothing has arrived"
        stream.push(token(stream, 8), stream.loop.time())
        stream.push(token(stream, 9, FinishReason.LENGTH), stream.loop.time())
        second = await asyncio.wait_for(reader, 1.0)
        assert stream.finished
        return [[e.token_id for e in first], [e.token_id for e in second]]

    assert run(body) == [[5, 6, 7], [8, 9]]


def test_a_hold_ignores_events_before_its_deadline_and_ends_with_the_first_one_past_it() -> None:
    async def body(stream: SequenceStream, _: AbortLog) -> list[int]:
        now = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=now + 10.0, hold_grace=10.0))
        await asyncio.sleep(0)
        stream.push(token(stream, 1), now + 1.0)  # a step that ended before the deadline: keep gathering
        stream.push(token(stream, 2), now + 9.9)
        await asyncio.sleep(0.01)
        assert not reader.done()
        stream.push(token(stream, 3), now + 10.0)  # the first step at the deadline: everything goes together
        return [e.token_id for e in await asyncio.wait_for(reader, 1.0)]

    assert run(body) == [1, 2, 3]


def test_the_end_of_the_sequence_cuts_a_hold_short() -> None:
    async def body(stream: SequenceStream, _: AbortLog) -> list[TokenEvent]:
        now = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=now + 60.0, hold_grace=60.0))
        await asyncio.sleep(0)
        stream.push(token(stream, 1), now)
        stream.push(token(stream, 2, FinishReason.STOP), now)
        return await asyncio.wait_for(reader, 1.0)

    events = run(body)
    assert [e.token_id for e in events] == [1, 2] and events[-1].finish_reason is FinishReason.STOP


def test_a_hold_gives_up_after_its_grace_when_no_later_event_comes() -> None:
    # A preempted sequence gets no events for a while: what it holds must still go out.
    async def body(stream: SequenceStream, _: AbortLog) -> tuple[list[int], float]:
        t0 = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=t0 + 0.02, hold_grace=0.03))
        await asyncio.sleep(0)
        stream.push(token(stream, 4), t0)
        events = await asyncio.wait_for(reader, 2.0)
        return [e.token_id for e in events], stream.loop.time() - t0

    ids, waited = run(body)
    assert ids == [4] and waited >= 0.05


def test_a_hold_that_ends_with_nothing_gathered_waits_for_the_next_event() -> None:
    async def body(stream: SequenceStream, _: AbortLog) -> list[int]:
        now = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=now + 0.01, hold_grace=0.0))
        await asyncio.sleep(0.05)
        assert not reader.done(), "an empty take() must not return"
        stream.push(token(stream, 7), stream.loop.time())
        return [e.token_id for e in await asyncio.wait_for(reader, 1.0)]

    assert run(body) == [7]


def test_a_deadline_already_past_returns_what_is_there_at_once() -> None:
    async def body(stream: SequenceStream, _: AbortLog) -> list[int]:
        now = stream.loop.time()
        stream.push(token(stream, 3), now)
        return [e.token_id for e in await asyncio.wait_for(stream.take(hold_until=now - 1.0), 0.5)]

    assert run(body) == [3]


def test_a_cancelled_take_leaves_the_stream_readable() -> None:
    async def body(stream: SequenceStream, _: AbortLog) -> list[int]:
        reader = asyncio.create_task(stream.take(hold_until=stream.loop.time() + 60.0, hold_grace=60.0))
        await asyncio.sleep(0)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        stream.push(token(stream, 9), stream.loop.time())
        return [e.token_id for e in await asyncio.wait_for(stream.take(), 1.0)]

    assert run(body) == [9]


def test_next_and_take_read_the_same_events_once() -> None:
    async def body(stream: SequenceStream, _: AbortLog) -> tuple[int | None, list[int], TokenEvent | None]:
        now = stream.loop.time()
        for t in (1, 2, 3):
            stream.push(token(stream, t), now)
        one = await stream.next(0)
        rest = [e.token_id for e in await stream.take()]
        return (one.token_id if one else None), rest, await stream.next(0.01)

    assert run(body) == (1, [2, 3], None)


def test_closing_aborts_only_an_unfinished_sequence() -> None:
    async def body(stream: SequenceStream, log: AbortLog) -> list[int]:
        stream.close()
        stream.close()
        return log.aborted

    assert len(run(body)) == 1

    async def finished(stream: SequenceStream, log: AbortLog) -> list[int]:
        stream.push(token(stream, 1, FinishReason.LENGTH), stream.loop.time())
        await stream.take()
        stream.close()
        return log.aborted

    assert run(finished) == []


# --- AsyncEngine delivery -----------------------------------------------------------------------------------------

def make_async(delay: float = 0.002) -> tuple[AsyncEngine, list[StepStats]]:
    blocks = BlockManager(64, 4)
    sched = Scheduler(SchedulerLimits(8, 64, 1000), blocks)
    steps: list[StepStats] = []
    return AsyncEngine(Engine(sched, SlowRunner(blocks, delay)), on_step=steps.append), steps


def test_a_step_reaches_the_event_loop_in_one_call_for_all_its_sequences() -> None:
    aeng, steps = make_async()
    posts: list[int] = []

    async def main() -> list[list[TokenEvent]]:
        loop = asyncio.get_running_loop()
        post = loop.call_soon_threadsafe

        def counting(callback: Callable[..., object], *args: object) -> asyncio.Handle:
            posts.append(len(args[0]) if args else 0)
            return post(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        streams = [aeng.submit(make_seq([i + 1, i + 2], SamplingOptions(temperature=0.0, max_tokens=6)))
                   for i in range(4)]
        return await asyncio.gather(*(collect(s) for s in streams))

    try:
        results = asyncio.run(main())
    finally:
        aeng.close()
    events = sum(len(r) for r in results)
    assert events == 4 * 6 and all(r[-1].finish_reason is FinishReason.LENGTH for r in results)
    assert len(posts) <= len(steps) and sum(posts) == events  # never one post per sequence
    assert max(posts) == 4  # the steps that decode every row post all four rows at once


def test_streams_whose_event_loop_is_gone_are_dropped_and_their_sequences_aborted() -> None:
    aeng, _ = make_async(delay=0.005)
    blocks = aeng.engine.scheduler.blocks
    seq = make_seq([1, 2, 3], LONG)

    async def main() -> None:
        stream = aeng.submit(seq)
        assert (await stream.next(5.0)) is not None  # running; then this loop closes under it

    try:
        asyncio.run(main())
        end = time.monotonic() + 5.0
        while not (seq.is_finished and blocks.num_free_blocks == 64):
            assert time.monotonic() < end, "the orphaned sequence was never aborted"
            time.sleep(0.005)
        assert seq.finish_reason is FinishReason.CANCELLED and aeng._streams == {}
        assert aeng.failure is None and aeng._thread.is_alive()  # the engine itself carries on
    finally:
        aeng.close()


def test_a_dead_engine_ends_streams_on_their_loop_with_one_post() -> None:
    aeng, _ = make_async()
    aeng.engine.runner.fail_at_step = 3

    async def main() -> list[list[TokenEvent]]:
        streams = [aeng.submit(make_seq([i + 1], LONG)) for i in range(3)]
        return await asyncio.gather(*(collect(s) for s in streams))

    try:
        results = asyncio.run(main())
    finally:
        aeng.close()
    for events in results:
        assert events[-1].token_id is None and events[-1].finish_reason is FinishReason.CANCELLED
    assert isinstance(aeng.failure, RuntimeError) and aeng._streams == {}
