"""`EncodeBatcher`: gathers items from concurrent requests into one encoder call, within a patch budget.

Pure asyncio: the first waiting item opens a batch; items that arrive within `max_wait_s` join it while the
batch stays under `max_batch_patches` (a lone item over the budget still runs, alone). The encode function
runs in a worker thread so the event loop keeps serving; its per-item results resolve each caller's future.
An item whose caller was cancelled before its batch started is dropped.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class Pending(Generic[Item, Result]):
    item: Item
    size: int
    future: asyncio.Future[Result] = field(repr=False)


class EncodeBatcher(Generic[Item, Result]):
    def __init__(
        self,
        encode: Callable[[Sequence[Item]], list[Result]],
        size_of: Callable[[Item], int],
        max_batch_patches: int,
        max_wait_s: float = 0.005,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        if max_batch_patches < 1:
            raise ValueError(f"max_batch_patches={max_batch_patches} must be >= 1")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s={max_wait_s} must be >= 0")
        self.encode = encode
        self.size_of = size_of
        self.max_batch_patches = max_batch_patches
        self.max_wait_s = max_wait_s
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="vision-encode")
        self.queue: asyncio.Queue[Pending[Item, Result]] = asyncio.Queue()
        self.carry: Pending[Item, Result] | None = None  # the item that did not fit the previous batch
        self.task: asyncio.Task[None] | None = None
        self.num_batches = 0

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.run(), name="vision-encode-batcher")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    async def submit(self, item: Item) -> Result:
        """The encoder's result for `item`, computed in whatever batch it lands in."""
        self.start()
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        await self.queue.put(Pending(item, self.size_of(item), future))
        return await future

    async def next_batch(self) -> list[Pending[Item, Result]]:
        first = self.carry or await self.queue.get()
        self.carry = None
        batch, budget = [first], self.max_batch_patches - first.size
        deadline = asyncio.get_running_loop().time() + self.max_wait_s
        while budget > 0:
            timeout = deadline - asyncio.get_running_loop().time()
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

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [p for p in await self.next_batch() if not p.future.done()]  # drop cancelled callers
            if not batch:
                continue
            self.num_batches += 1
            try:
                results = await loop.run_in_executor(self.executor, self.encode, [p.item for p in batch])
            except Exception as err:  # noqa: BLE001 - every caller of the batch gets the encoder's error
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(err)
                continue
            for p, result in zip(batch, results):
                if not p.future.done():
                    p.future.set_result(result)
