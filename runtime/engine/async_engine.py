"""Runs an Engine on its own thread and streams each sequence's events to the asyncio task that asked for it."""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from runtime.engine.engine import Engine, StepStats, TokenEvent
from runtime.engine.sequence import FinishReason, Sequence
from runtime.heartbeat import Heartbeat
from runtime.thread_names import name_this_thread

log = logging.getLogger(__name__)

_Batch = list[tuple["SequenceStream", TokenEvent]]  # one step's events bound for one event loop


@dataclass(frozen=True)
class _Add:
    stream: SequenceStream


@dataclass(frozen=True)
class _Abort:
    seq_id: int


class AsyncEngine:
    """The engine loop on a thread (the model's work releases the GIL); requests come and go between steps.

    `submit(seq)` returns a SequenceStream of the sequence's TokenEvents; closing it before the sequence finished
    (cancellation, a stop string) aborts the sequence, which frees its KV before the next step.

    A step's events reach the event loop in one call, not one per sequence: each `call_soon_threadsafe` writes
    to the loop's self-pipe, which wakes the loop and makes the engine thread give up the GIL mid-delivery.
    """

    def __init__(self, engine: Engine, on_step: Callable[[StepStats], None] | None = None) -> None:
        self.engine = engine
        self._on_step = on_step
        self._commands: queue.SimpleQueue[_Add | _Abort | None] = queue.SimpleQueue()
        self._streams: dict[int, SequenceStream] = {}  # seq_id -> the stream of a sequence still running
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._failure: BaseException | None = None
        self.heartbeat = Heartbeat()
        self._thread.start()

    def close(self) -> None:
        self._commands.put(None)
        self._thread.join(timeout=10)

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def submit(self, seq: Sequence) -> SequenceStream:
        """Queues `seq` for the next step; read its events from the returned stream, close it to abort."""
        stream = SequenceStream(seq, self, asyncio.get_running_loop())
        if self._failure is not None:  # nobody would ever answer: end the stream now
            stream.push(TokenEvent(seq, None, finish_reason=FinishReason.CANCELLED), stream.loop.time())
            return stream
        self._commands.put(_Add(stream))
        return stream

    def abort(self, seq_id: int) -> None:
        self._commands.put(_Abort(seq_id))

    def _loop(self) -> None:
        name_this_thread("engine")
        try:
            while True:
                block = not self.engine.has_work
                if not self._drain_commands(block):
                    return
                with self.heartbeat.beat():
                    events, stats = self.engine.step()
                if events:
                    self._deliver(events)
                if stats is not None and self._on_step is not None:
                    self._on_step(stats)
        except BaseException as e:  # a dead engine must fail every open stream, not hang it
            log.exception("engine loop died")
            self._failure = e
            self._fail_all()

    def _deliver(self, events: list[TokenEvent]) -> None:
        """Hands one step's events to their streams, one call per event loop (a server has one)."""
        batches: dict[asyncio.AbstractEventLoop, _Batch] = {}
        for ev in events:
            stream = self._streams.get(ev.seq.seq_id)
            if stream is None:
                continue
            if ev.finish_reason is not None:
                del self._streams[ev.seq.seq_id]
            batches.setdefault(stream.loop, []).append((stream, ev))
        for loop, batch in batches.items():
            self._post(loop, batch)

    def _post(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> None:
        try:
            loop.call_soon_threadsafe(_push_all, batch)
        except RuntimeError:  # the streams' event loop is gone (shutdown): drop the streams, free their KV
            for _, ev in batch:
                log.warning("dropping request %s: its stream can no longer be reached", ev.seq.request_id)
                self._streams.pop(ev.seq.seq_id, None)
                self.engine.abort(ev.seq.seq_id)

    def _fail_all(self) -> None:
        """Ends every open stream and every one still queued with CANCELLED."""
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
            if isinstance(cmd, _Add):
                self._streams[cmd.stream.seq.seq_id] = cmd.stream
                self.engine.add(cmd.stream.seq)
        batches: dict[asyncio.AbstractEventLoop, _Batch] = {}
        for seq_id, stream in list(self._streams.items()):
            seq = self.engine.abort(seq_id)
            if seq is not None:
                batches.setdefault(stream.loop, []).append(
                    (stream, TokenEvent(seq, None, finish_reason=FinishReason.CANCELLED)))
        self._streams.clear()
        for loop, batch in batches.items():
            try:
                loop.call_soon_threadsafe(_push_all, batch)
            except RuntimeError:  # that loop is gone too: nobody is left to tell
                pass

    def _drain_commands(self, block: bool) -> bool:
        """Applies queued adds and aborts; waits for one when idle. False when asked to stop."""
        while True:
            try:
                cmd = self._commands.get(block=block, timeout=None)
            except queue.Empty:
                return True
            block = False
            if cmd is None:
                return False
            if isinstance(cmd, _Add):
                self._streams[cmd.stream.seq.seq_id] = cmd.stream
                self.engine.add(cmd.stream.seq)
            else:
                self._streams.pop(cmd.seq_id, None)
                self.engine.abort(cmd.seq_id)


def _push_all(batch: _Batch) -> None:
    now = batch[0][0].loop.time()
    for stream, ev in batch:
        stream.push(ev, now)


class SequenceStream:
    """The events of one submitted sequence, read on the event loop that submitted it (one reader).

    Use as `async with`: leaving the block aborts an unfinished sequence. `next()` reads one event; `take()`
    reads every event that has arrived, so a reader that falls behind catches up in one go.
    """

    def __init__(self, seq: Sequence, engine: AsyncEngine, loop: asyncio.AbstractEventLoop) -> None:
        self.seq = seq
        self.loop = loop
        self._engine = engine
        self._events: deque[TokenEvent] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._hold_until: float | None = None  # while set, only an event at or past it (or the last) wakes the reader
        self._ended = False  # the final event has arrived (it may not have been read yet)
        self.finished = False  # the final event was read, or the stream was closed

    def push(self, ev: TokenEvent, now: float) -> None:
        """Called on `loop` with each event in order; `now` is the loop's clock."""
        self._events.append(ev)
        if ev.finish_reason is not None:
            self._ended = True
        if self._hold_until is None or self._ended or now >= self._hold_until:
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self, deadline: float | None, hold_until: float | None = None) -> None:
        """Until an event wakes us (see `push`) or the loop's clock passes `deadline`."""
        assert self._waiter is None, "a SequenceStream has one reader"
        self._waiter = self.loop.create_future()
        self._hold_until = hold_until
        timer = None if deadline is None else self.loop.call_at(deadline, self._wake)
        try:
            await self._waiter
        finally:
            self._waiter = None
            self._hold_until = None
            if timer is not None:
                timer.cancel()

    async def next(self, timeout: float | None = None) -> TokenEvent | None:
        """The next event, or None when `timeout` seconds pass first."""
        if not self._events and (timeout is None or timeout > 0):
            await self._wait(None if timeout is None else self.loop.time() + timeout)
        if not self._events:
            return None
        ev = self._events.popleft()
        if ev.finish_reason is not None:
            self.finished = True
        return ev

    async def take(self, hold_until: float | None = None, hold_grace: float = 0.0) -> list[TokenEvent]:
        """Every event that has arrived, in order, after waiting for one if none has.

        With `hold_until` (the loop's clock), events are left to gather until the first one that arrives at or
        after that time, or the sequence's end. A step's events arrive together, so every stream due in a step
        wakes in the same pass of the loop, woken by the delivery rather than by a timer firing on its own; only a
        sequence that gets no events for a while (preempted) is ended by its timer, `hold_grace` seconds after
        `hold_until`.
        """
        if hold_until is not None and not self._ended and self.loop.time() < hold_until:
            await self._wait(hold_until + hold_grace, hold_until)
        while not self._events:
            await self._wait(None)
        events = list(self._events)
        self._events.clear()
        if events[-1].finish_reason is not None:
            self.finished = True
        return events

    async def __aenter__(self) -> SequenceStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.finished:
            self.finished = True
            self._engine.abort(self.seq.seq_id)
