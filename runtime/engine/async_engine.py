"""Runs an Engine on its own thread and streams each sequence's events to the asyncio task that asked for it."""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from runtime.engine.engine import Engine, StepStats, TokenEvent
from runtime.engine.sequence import FinishReason, Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Add:
    seq: Sequence
    sink: Callable[[TokenEvent], None]


@dataclass(frozen=True)
class _Abort:
    seq_id: int


class AsyncEngine:
    """The engine loop on a thread (the model's work releases the GIL); requests come and go between steps.

    `submit(seq)` returns a SequenceStream of the sequence's TokenEvents; closing it before the sequence finished
    (cancellation, a stop string) aborts the sequence, which frees its KV before the next step.
    """

    def __init__(self, engine: Engine, on_step: Callable[[StepStats], None] | None = None) -> None:
        self.engine = engine
        self._on_step = on_step
        self._commands: queue.SimpleQueue[_Add | _Abort | None] = queue.SimpleQueue()
        self._sinks: dict[int, Callable[[TokenEvent], None]] = {}
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._failure: BaseException | None = None
        self._thread.start()

    def close(self) -> None:
        self._commands.put(None)
        self._thread.join(timeout=10)

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def submit(self, seq: Sequence) -> SequenceStream:
        """Queues `seq` for the next step; read its events from the returned stream, close it to abort."""
        loop = asyncio.get_running_loop()
        stream = SequenceStream(seq, self)
        if self._failure is not None:  # nobody would ever answer: end the stream now
            stream.events.put_nowait(TokenEvent(seq, None, finish_reason=FinishReason.CANCELLED))
            return stream
        self._commands.put(_Add(seq, lambda ev: loop.call_soon_threadsafe(stream.events.put_nowait, ev)))
        return stream

    def abort(self, seq_id: int) -> None:
        self._commands.put(_Abort(seq_id))

    def _loop(self) -> None:
        try:
            while True:
                block = not self.engine.has_work
                if not self._drain_commands(block):
                    return
                events, stats = self.engine.step()
                for ev in events:
                    self._deliver(ev)
                if stats is not None and self._on_step is not None:
                    self._on_step(stats)
        except BaseException as e:  # a dead engine must fail every open stream, not hang it
            log.exception("engine loop died")
            self._failure = e
            self._fail_all()

    def _deliver(self, ev: TokenEvent) -> None:
        sink = self._sinks.get(ev.seq.seq_id)
        if sink is None:
            return
        try:
            sink(ev)
        except RuntimeError:  # the stream's event loop is gone (shutdown): drop the stream, free its KV
            log.warning("dropping request %s: its stream can no longer be reached", ev.seq.request_id)
            self._sinks.pop(ev.seq.seq_id, None)
            self.engine.abort(ev.seq.seq_id)
            return
        if ev.finish_reason is not None:
            del self._sinks[ev.seq.seq_id]

    def _fail_all(self) -> None:
        """Ends every open stream and every one still queued with CANCELLED."""
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
            if isinstance(cmd, _Add):
                self._sinks[cmd.seq.seq_id] = cmd.sink
                self.engine.add(cmd.seq)
        for seq_id, sink in list(self._sinks.items()):
            seq = self.engine.abort(seq_id)
            if seq is not None:
                try:
                    sink(TokenEvent(seq, None, finish_reason=FinishReason.CANCELLED))
                except RuntimeError:
                    pass
        self._sinks.clear()

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
                self._sinks[cmd.seq.seq_id] = cmd.sink
                self.engine.add(cmd.seq)
            else:
                self._sinks.pop(cmd.seq_id, None)
                self.engine.abort(cmd.seq_id)


class SequenceStream:
    """The events of one submitted sequence. Use as `async with`: leaving the block aborts an unfinished sequence."""

    def __init__(self, seq: Sequence, engine: AsyncEngine) -> None:
        self.seq = seq
        self.events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self._engine = engine
        self.finished = False

    async def next(self, timeout: float | None = None) -> TokenEvent | None:
        """The next event, or None when `timeout` seconds pass first."""
        try:
            if timeout is None:
                ev = await self.events.get()
            elif timeout <= 0:
                ev = self.events.get_nowait()
            else:
                ev = await asyncio.wait_for(self.events.get(), timeout)
        except (asyncio.TimeoutError, asyncio.QueueEmpty):
            return None
        if ev.finish_reason is not None:
            self.finished = True
        return ev

    async def __aenter__(self) -> SequenceStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.finished:
            self.finished = True
            self._engine.abort(self.seq.seq_id)
