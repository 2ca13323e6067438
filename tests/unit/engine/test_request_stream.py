"""RequestStream: take() gathers, holds until a step past the deadline, reads once, raises an error item, aborts
on close."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from runtime.engine.engine import TokenEvent
from runtime.engine.request_stream import RequestStream
from runtime.engine.sequence import FinishReason
from runtime.errors import Unavailable
from tests.unit.engine.engine_fakes import make_seq

SEQ = make_seq([1, 2])


class AbortLog:
    """Stands in for the EngineLoop behind a stream: records aborts and commands."""

    def __init__(self) -> None:
        self.aborted: list[int] = []
        self.commands: list[object] = []

    def abort(self, key: int) -> None:
        self.aborted.append(key)

    def command(self, command: object) -> None:
        self.commands.append(command)


def run(test: Callable[[RequestStream, AbortLog], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        log = AbortLog()
        stream = RequestStream(SEQ.seq_id, "r", log, asyncio.get_running_loop())  # type: ignore[arg-type]
        return await test(stream, log)

    return asyncio.run(main())


def push(stream: RequestStream, t: int, now: float, finish: FinishReason | None = None) -> None:
    stream.push(TokenEvent(SEQ, t, finish_reason=finish), finish is not None, now)


def test_take_returns_every_event_that_arrived_in_order() -> None:
    async def body(stream: RequestStream, _: AbortLog) -> list[list[int]]:
        now = stream.loop.time()
        for t in (5, 6, 7):
            push(stream, t, now)
        first = await stream.take()
        reader = asyncio.create_task(stream.take())
        await asyncio.sleep(0.01)
        assert not reader.done(), "take() must wait while nothing has arrived"
        push(stream, 8, stream.loop.time())
        push(stream, 9, stream.loop.time(), FinishReason.LENGTH)
        second = await asyncio.wait_for(reader, 1.0)
        assert stream.finished
        return [[e.token_id for e in first], [e.token_id for e in second]]

    assert run(body) == [[5, 6, 7], [8, 9]]


def test_a_hold_ignores_events_before_its_deadline_and_ends_with_the_first_one_past_it() -> None:
    async def body(stream: RequestStream, _: AbortLog) -> list[int]:
        now = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=now + 10.0, hold_grace=10.0))
        await asyncio.sleep(0)
        push(stream, 1, now + 1.0)  # a step that ended before the deadline: keep gathering
        push(stream, 2, now + 9.9)
        await asyncio.sleep(0.01)
        assert not reader.done()
        push(stream, 3, now + 10.0)  # the first step at the deadline: everything goes together
        return [e.token_id for e in await asyncio.wait_for(reader, 1.0)]

    assert run(body) == [1, 2, 3]


def test_the_end_of_the_sequence_cuts_a_hold_short() -> None:
    async def body(stream: RequestStream, _: AbortLog) -> list[TokenEvent]:
        now = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=now + 60.0, hold_grace=60.0))
        await asyncio.sleep(0)
        push(stream, 1, now)
        push(stream, 2, now, FinishReason.STOP)
        return await asyncio.wait_for(reader, 1.0)

    events = run(body)
    assert [e.token_id for e in events] == [1, 2] and events[-1].finish_reason is FinishReason.STOP


def test_a_hold_gives_up_after_its_grace_when_no_later_event_comes() -> None:
    # A preempted sequence gets no events for a while: what it holds must still go out.
    async def body(stream: RequestStream, _: AbortLog) -> tuple[list[int], float]:
        t0 = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=t0 + 0.02, hold_grace=0.03))
        await asyncio.sleep(0)
        push(stream, 4, t0)
        events = await asyncio.wait_for(reader, 2.0)
        return [e.token_id for e in events], stream.loop.time() - t0

    ids, waited = run(body)
    assert ids == [4] and waited >= 0.05


def test_a_hold_that_ends_with_nothing_gathered_waits_for_the_next_event() -> None:
    async def body(stream: RequestStream, _: AbortLog) -> list[int]:
        now = stream.loop.time()
        reader = asyncio.create_task(stream.take(hold_until=now + 0.01, hold_grace=0.0))
        await asyncio.sleep(0.05)
        assert not reader.done(), "an empty take() must not return"
        push(stream, 7, stream.loop.time())
        return [e.token_id for e in await asyncio.wait_for(reader, 1.0)]

    assert run(body) == [7]


def test_a_deadline_already_past_returns_what_is_there_at_once() -> None:
    async def body(stream: RequestStream, _: AbortLog) -> list[int]:
        now = stream.loop.time()
        push(stream, 3, now)
        return [e.token_id for e in await asyncio.wait_for(stream.take(hold_until=now - 1.0), 0.5)]

    assert run(body) == [3]


def test_a_cancelled_take_leaves_the_stream_readable() -> None:
    async def body(stream: RequestStream, _: AbortLog) -> list[int]:
        reader = asyncio.create_task(stream.take(hold_until=stream.loop.time() + 60.0, hold_grace=60.0))
        await asyncio.sleep(0)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        push(stream, 9, stream.loop.time())
        return [e.token_id for e in await asyncio.wait_for(stream.take(), 1.0)]

    assert run(body) == [9]


def test_next_and_take_read_the_same_events_once() -> None:
    async def body(stream: RequestStream, _: AbortLog) -> tuple[int | None, list[int], TokenEvent | None]:
        now = stream.loop.time()
        for t in (1, 2, 3):
            push(stream, t, now)
        one = await stream.next(0)
        rest = [e.token_id for e in await stream.take()]
        return (one.token_id if one else None), rest, await stream.next(0.01)

    assert run(body) == (1, [2, 3], None)


def test_closing_aborts_only_an_unfinished_sequence() -> None:
    async def body(stream: RequestStream, log: AbortLog) -> list[int]:
        stream.close()
        stream.close()
        return log.aborted

    assert len(run(body)) == 1

    async def finished(stream: RequestStream, log: AbortLog) -> list[int]:
        push(stream, 1, stream.loop.time(), FinishReason.LENGTH)
        await stream.take()
        stream.close()
        return log.aborted

    assert run(finished) == []


def test_an_error_item_ends_the_stream_after_what_came_before_it() -> None:
    async def body(stream: RequestStream, log: AbortLog) -> tuple[list[int], list[int]]:
        now = stream.loop.time()
        push(stream, 1, now)
        push(stream, 2, now)
        stream.push(Unavailable("gone", stage="thinker"), True, now)
        push(stream, 3, now, FinishReason.STOP)  # after the end: ignored
        first = [e.token_id for e in await stream.take()]
        assert not stream.finished
        with pytest.raises(Unavailable, match="gone"):
            await stream.take()
        assert stream.finished
        return first, log.aborted

    assert run(body) == ([1, 2], [SEQ.seq_id])  # the core is told, in case the error came from the reader's side


def test_fail_from_the_reader_side_raises_on_next_and_aborts_the_request() -> None:
    async def body(stream: RequestStream, log: AbortLog) -> list[int]:
        stream.fail(ValueError("bad input"))
        with pytest.raises(ValueError, match="bad input"):
            await stream.next(1)
        stream.close()
        return log.aborted

    assert run(body) == [SEQ.seq_id]


def test_send_passes_commands_until_the_stream_ends() -> None:
    async def body(stream: RequestStream, log: AbortLog) -> list[object]:
        stream.send("more")
        push(stream, 1, stream.loop.time(), FinishReason.STOP)
        await stream.next()
        stream.send("late")
        return log.commands

    assert run(body) == ["more"]
