"""`EncodeBatcher`: gathers items from concurrent requests into one encoder call, within a size budget.

Pure asyncio, shared by the encoder stages (vision counts patches, audio its own unit): the first waiting item
opens a batch; items that arrive within `max_wait_s` of it join it while the batch stays under `max_batch_size` (a
lone item over the budget still runs, alone). Items that queued while a forward ran form the next batch as soon as
it ends, without a further wait. An item that came more than `COMPANY_GAPS` waits after the one before it starts
at once when alone: at one request at a time the wait would only add its full length to every request's latency,
while the second item of a burst (a short gap) still waits for the rest. The encode function runs in a worker
thread so the event loop keeps serving; its per-item results resolve each caller's future. An item whose caller
was cancelled before its batch started is dropped. A failed encode fails its batch's callers only; one that
`is_fatal` names (a device fault) is also kept as `fatal_error`, for the stage's health.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from runtime.heartbeat import Heartbeat
from runtime.thread_names import name_this_thread

Item = TypeVar("Item")
Result = TypeVar("Result")

# A lone item waits for company only if it came at most this many max_wait_s after the item before it: arrivals
# further apart bring another item within the wait under 2/5 of the time (Poisson). The last gap, not a running
# mean: after a quiet spell a mean stays long and would keep a burst's second item from waiting for the rest.
COMPANY_GAPS = 2.0


class Timed(NamedTuple, Generic[Result]):
    """One item's result and where its time went."""

    result: Result
    batch_index: int  # which forward computed it; items of one request may share one
    queue_seconds: float  # submit to the start of its batch
    compute_seconds: float  # wall time of its batch's encode call


def request_timings(timed: Sequence[Timed[Any]]) -> tuple[float, float]:
    """(queue seconds until the request's first forward, seconds of the distinct forwards it took part in)."""
    return min(t.queue_seconds for t in timed), sum({t.batch_index: t.compute_seconds for t in timed}.values())


@dataclass(frozen=True)
class BatchStats:
    """What one encode call did, for metrics."""

    num_items: int
    size: int  # sum of the items' sizes
    compute_seconds: float
    queue_seconds: tuple[float, ...]  # per item


@dataclass
class Pending(Generic[Item, Result]):
    item: Item
    size: int
    future: asyncio.Future[Timed[Result]] = field(repr=False)
    enqueued_at: float = field(default_factory=time.monotonic)


class EncodeBatcher(Generic[Item, Result]):
    def __init__(
        self,
        encode: Callable[[Sequence[Item]], list[Result]],
        size_of: Callable[[Item], int],
        max_batch_size: int,
        max_wait_s: float = 0.005,
        executor: ThreadPoolExecutor | None = None,
        on_batch: Callable[[BatchStats], None] | None = None,
        on_depth: Callable[[int], None] | None = None,
        is_fatal: Callable[[BaseException], bool] | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be >= 1")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s={max_wait_s} must be >= 0")
        self.encode = encode
        self.size_of = size_of
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode",
                                                     initializer=name_this_thread, initargs=("encode",))
        self.on_batch = on_batch
        self.on_depth = on_depth
        self.is_fatal = is_fatal
        self.fatal_error: BaseException | None = None  # the first encode error `is_fatal` named
        self.heartbeat = Heartbeat()  # around each encode call
        self.queue: asyncio.Queue[Pending[Item, Result]] = asyncio.Queue()
        self.carry: Pending[Item, Result] | None = None  # the item that did not fit the previous batch
        self.last_arrival: float | None = None
        self.last_gap: float | None = None  # seconds between the last two arrivals; None: not known yet
        self.task: asyncio.Task[None] | None = None
        self.num_batches = 0

    @property
    def num_waiting(self) -> int:
        """Items submitted and not yet taken into a batch."""
        return self.queue.qsize() + (self.carry is not None)

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.run(), name="encode-batcher")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    def close(self) -> None:
        """Stops batching from sync code at shutdown; a forward in flight finishes in its thread, unobserved."""
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, item: Item) -> Result:
        """The encoder's result for `item`, computed in whatever batch it lands in."""
        return (await self.submit_timed(item)).result

    async def submit_timed(self, item: Item) -> Timed[Result]:
        """`submit`, with the batch that computed the item and its queue and compute seconds."""
        self.start()
        future: asyncio.Future[Timed[Result]] = asyncio.get_running_loop().create_future()
        pending = Pending(item, self.size_of(item), future)
        self._note_arrival(pending.enqueued_at)
        self.queue.put_nowait(pending)
        self._report_depth()
        return await future

    async def submit_in_order(self, items: Sequence[Item]) -> AsyncIterator[Timed[Result]]:
        """One request's items, all queued at once; each result as soon as it and those before it are done.

        Leaving early (a cancelled or failed request) takes the request's remaining items out of the queue.
        """
        tasks = [asyncio.ensure_future(self.submit_timed(item)) for item in items]
        try:
            for task in tasks:
                yield await task
        finally:
            for task in tasks:
                if task.done() and not task.cancelled():
                    task.exception()  # marks a sibling's failure as seen; the first one already propagated
                task.cancel()

    async def next_batch(self) -> list[Pending[Item, Result]]:
        first = self.carry or await self.queue.get()
        self.carry = None
        batch, budget = [first], self.max_batch_size - first.size
        # the wait counts from the first item's arrival, not from now: an item that queued behind a forward has
        # waited already, so it goes with whatever else is queued as soon as the encoder is free (under load the
        # encoder never idles max_wait_s between forwards)
        deadline = first.enqueued_at + (self.max_wait_s if self.company_likely else 0.0)
        while budget > 0:
            timeout = deadline - time.monotonic()
            try:
                nxt = self.queue.get_nowait() if timeout <= 0 else await asyncio.wait_for(self.queue.get(), timeout)
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            if nxt.size > budget:
                self.carry = nxt
                break
            batch.append(nxt)
            budget -= nxt.size
        return batch

    @property
    def company_likely(self) -> bool:
        """Whether the newest item came close enough after the one before for a lone item to wait for another."""
        return self.last_gap is None or self.last_gap <= COMPANY_GAPS * self.max_wait_s

    def _note_arrival(self, now: float) -> None:
        if self.last_arrival is not None:
            self.last_gap = now - self.last_arrival
        self.last_arrival = now

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [p for p in await self.next_batch() if not p.future.done()]  # drop cancelled callers
            self._report_depth()
            if not batch:
                continue
            index = self.num_batches
            self.num_batches += 1
            started = time.monotonic()
            try:
                with self.heartbeat.beat():
                    results = await loop.run_in_executor(self.executor, self.encode, [p.item for p in batch])
            except Exception as err:  # noqa: BLE001 - every caller of the batch gets the encoder's error
                if self.fatal_error is None and self.is_fatal is not None and self.is_fatal(err):
                    self.fatal_error = err
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(err)
                continue
            compute = time.monotonic() - started
            queued = tuple(started - p.enqueued_at for p in batch)
            for p, result, wait in zip(batch, results, queued):
                if not p.future.done():
                    p.future.set_result(Timed(result, index, wait, compute))
            if self.on_batch is not None:
                self.on_batch(BatchStats(len(batch), sum(p.size for p in batch), compute, queued))

    def _report_depth(self) -> None:
        if self.on_depth is not None:
            self.on_depth(self.num_waiting)
