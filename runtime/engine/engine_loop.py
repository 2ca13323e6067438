"""Runs a StepCore on its own thread: commands in from asyncio, outputs back to each request's stream, failure and
heartbeat, engine metrics and the slow-step log. Every decoder stage (thinker, talker) runs on this one loop."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable

from runtime.engine.request_stream import RequestStream
from runtime.engine.slow_steps import SlowStepLog
from runtime.engine.step_core import Abort, Add, Output, StepCore, StepStats
from runtime.engine.step_metrics import bind_engine_metrics
from runtime.engine.step_profile import step_profiler_from_env
from runtime.errors import Unavailable
from runtime.heartbeat import Heartbeat
from runtime.metrics import Metrics
from runtime.thread_names import name_this_thread

log = logging.getLogger(__name__)

_Batch = list[tuple[RequestStream, object, bool]]  # (stream, item, final) bound for one event loop
_Queued = tuple[object, RequestStream | None] | None  # a command (with its stream when it is an Add); None stops


class EngineLoop:
    """The core's loop on a thread (the model's work releases the GIL); requests come and go between steps.

    `submit` returns the request's RequestStream; closing it before its final output aborts the request, which
    frees its rows before the next step. A step's outputs reach the event loop in one call, not one per request:
    each `call_soon_threadsafe` writes to the loop's self-pipe, which wakes the loop and makes the engine thread
    give up the GIL mid-delivery.
    """

    def __init__(self, core: StepCore, metrics: Metrics | None = None,
                 on_step: Callable[[StepStats], None] | None = None) -> None:
        self.core = core
        self.heartbeat = Heartbeat()
        self._commands: queue.SimpleQueue[_Queued] = queue.SimpleQueue()
        self._streams: dict[int, RequestStream] = {}  # key -> the stream of a request still open
        self._failure: BaseException | None = None
        self._step_hooks = [SlowStepLog(core.stage)]
        self._profiler = step_profiler_from_env(core.stage)  # None unless an operator asked for a step profile
        if metrics is not None:
            self._step_hooks.append(bind_engine_metrics(metrics, core))
        if on_step is not None:
            self._step_hooks.append(on_step)
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=core.thread_name, daemon=True)
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise RuntimeError(f"the {core.stage} engine failed its warm-up") from self._failure

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        self._commands.put(None)
        self._thread.join(timeout=10)

    def submit(self, key: int, request: object, request_id: str = "-") -> RequestStream:
        """Queues `request` for the next step under `key`; read its outputs from the returned stream."""
        stream: RequestStream = RequestStream(key, request_id, self, asyncio.get_running_loop())
        if self._failure is None:
            self._commands.put((Add(key, request), stream))
        # Checked after the put too: a loop that died meanwhile may have drained its queue before this Add.
        # A stream pushed twice keeps only the first final item.
        if self._failure is not None:
            stream.push(self._error(self._failure), True, stream.loop.time())
        return stream

    def command(self, command: object) -> None:
        """Sends the core one of its own commands (applied between steps, in order)."""
        self._commands.put((command, None))

    def abort(self, key: int) -> None:
        self._commands.put((Abort(key), None))

    def _error(self, cause: BaseException) -> Unavailable:
        return Unavailable(f"the {self.core.stage} engine has failed: {cause!r}", stage=self.core.stage)

    # --- the engine thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        name_this_thread(self.core.thread_name)
        try:
            self.core.thread_started()
        except BaseException as e:
            self._failure = e  # __init__ raises it
            return
        finally:
            self._started.set()
        try:
            while True:
                applied = self._drain(block=not self.core.has_work)
                if applied < 0:
                    return
                # has_work is read again only when commands came (it walks the core's requests: host time on
                # every step's path); without any, the drain did not block, so there was work
                if applied and not self.core.has_work:
                    continue  # the commands (an abort) left nothing to do
                if (due_in := self.core.step_due_in()) > 0:
                    applied = self._drain_until(time.perf_counter() + due_in)
                    if applied < 0:
                        return
                    if applied and not self.core.has_work:
                        continue
                # the profiler outside the beat: writing its profile after the last profiled step is no stall
                profiling = self._profiler.step() if self._profiler is not None else contextlib.nullcontext()
                with profiling, self.heartbeat.beat():
                    outputs, stats = self.core.step()
                if outputs:
                    self._deliver(outputs)
                if stats is not None:
                    for hook in self._step_hooks:
                        hook(stats)
        except BaseException as e:  # a dead engine must fail every open stream, not hang it
            log.exception("%s engine loop died", self.core.stage)
            self._failure = e
            self._fail_all(e)

    def _drain(self, block: bool) -> int:
        """Applies queued commands; waits for one when `block`. Returns how many it applied, -1 when asked to stop."""
        applied = 0
        while True:
            try:
                queued = self._commands.get(block=block)
            except queue.Empty:
                return applied
            block = False
            if queued is None:
                return -1
            applied += 1
            self._apply(queued)

    def _drain_until(self, deadline: float) -> int:
        """Applies commands as they arrive until `deadline` (time.perf_counter); the same return as `_drain`."""
        applied = 0
        while (left := deadline - time.perf_counter()) > 0:
            try:
                queued = self._commands.get(timeout=left)
            except queue.Empty:
                break
            if queued is None:
                return -1
            applied += 1
            self._apply(queued)
        return applied

    def _apply(self, queued: tuple[object, RequestStream | None]) -> None:
        command, stream = queued
        if stream is not None:
            self._streams[stream.key] = stream
        elif isinstance(command, Abort):
            self._streams.pop(command.key, None)
        self.core.apply(command)

    def _deliver(self, outputs: list[Output]) -> None:
        """Hands outputs to their streams, one call per event loop (a server has one)."""
        batches: dict[asyncio.AbstractEventLoop, _Batch] = {}
        for key, item, final in outputs:
            stream = self._streams.get(key)
            if stream is None:
                continue  # aborted meanwhile
            final = final or isinstance(item, BaseException)
            if final:
                del self._streams[key]
            batches.setdefault(stream.loop, []).append((stream, item, final))
        for loop, batch in batches.items():
            try:
                loop.call_soon_threadsafe(_push_all, batch)
            except RuntimeError:  # the streams' event loop is gone (shutdown): drop the requests, free their rows
                for stream in dict.fromkeys(s for s, _, _ in batch):
                    log.warning("dropping request %s: its stream can no longer be reached", stream.request_id)
                    self._streams.pop(stream.key, None)
                    if self._failure is None:
                        self.core.apply(Abort(stream.key))

    def _fail_all(self, cause: BaseException) -> None:
        """Sends what the core still owes, then ends every open stream and every one still queued with an error."""
        while True:
            try:
                queued = self._commands.get_nowait()
            except queue.Empty:
                break
            if queued is not None and queued[1] is not None:
                self._streams[queued[1].key] = queued[1]
        try:
            owed = self.core.fail_all(cause)
        except BaseException:
            log.exception("%s engine: failing its requests failed too", self.core.stage)
            owed = []
        error = self._error(cause)
        self._deliver([*owed, *(Output(key, error, True) for key in list(self._streams))])
        self._streams.clear()


def _push_all(batch: _Batch) -> None:
    now = batch[0][0].loop.time()
    for stream, item, final in batch:
        stream.push(item, final, now)
