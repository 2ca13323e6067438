"""The asyncio side of one request in the talker engine: push thinker text in, await audio out, close to cancel."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from services.talker.request import AudioOut, FinishedOut

if TYPE_CHECKING:
    from services.talker.engine import SpeechEngine


class SpeechHandle:
    """Use as `async with`: leaving the block before the finish (client gone, an error) cancels the request,
    which frees its row and KV slot before the engine's next step."""

    def __init__(self, engine: SpeechEngine, job_id: int) -> None:
        self.job_id = job_id
        self._engine = engine
        self._events: asyncio.Queue[AudioOut | FinishedOut | BaseException] = asyncio.Queue()
        self.done = False

    def push_text(self, token_ids: list[int]) -> None:
        if token_ids and not self.done:
            self._engine.push_text(self.job_id, token_ids)

    def end_text(self) -> None:
        if not self.done:
            self._engine.end_text(self.job_id)

    def deliver(self, item: AudioOut | FinishedOut | BaseException) -> None:
        """What the engine (or the request reader, with an error) has for this stream; event-loop thread only."""
        self._events.put_nowait(item)

    async def next(self) -> AudioOut | FinishedOut:
        """The next audio chunk or the finish; raises the error that ended the request."""
        item = await self._events.get()
        if isinstance(item, BaseException):
            self.close()
            raise item
        if isinstance(item, FinishedOut):
            self.done = True
        return item

    def close(self) -> None:
        if not self.done:
            self.done = True
            self._engine.cancel(self.job_id)

    async def __aenter__(self) -> SpeechHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
