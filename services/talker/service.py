"""The talker's domain: a request and its thinker text in, audio chunks and the finish out (no protobuf here)."""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator

from runtime.engine.engine_loop import EngineLoop
from runtime.engine.request_stream import RequestStream
from runtime.errors import OmniError, ResourceExhausted, Unavailable
from runtime.metrics import Metrics
from services.talker.request import AudioOut, FinishedOut, SpeakInput
from services.talker.speech_core import MoreText, TextEnd

log = logging.getLogger(__name__)

# The thinker's text as it streams: each item is the ids produced since the last, None when the thinker ended.
TextFeed = AsyncIterator[list[int] | None]


class TalkerService:
    """Submits a request to the engine, relays its text while it runs, and streams its audio back."""

    def __init__(self, engine: EngineLoop, metrics: Metrics, max_in_flight: int) -> None:
        self.engine = engine  # running a SpeechCore
        self.metrics = metrics
        self.max_in_flight = max_in_flight  # rows + waiting queue: beyond it, back-pressure
        self._in_flight = 0
        self._keys = itertools.count()

    async def speak(self, inp: SpeakInput, text: TextFeed) -> AsyncIterator[AudioOut | FinishedOut]:
        if self.engine.failure is not None:
            raise Unavailable(f"the talker engine has failed: {self.engine.failure!r}", stage="talker")
        if self._in_flight >= self.max_in_flight:
            raise ResourceExhausted(f"the talker holds {self._in_flight} requests, its limit (speech.max_rows + "
                                    "speech.max_waiting); retry shortly or add a replica", retry_after_s=1.0)
        self._in_flight += 1
        try:
            async for out in self._speak(inp, text):
                yield out
        finally:
            self._in_flight -= 1

    async def _speak(self, inp: SpeakInput, text: TextFeed) -> AsyncIterator[AudioOut | FinishedOut]:
        stream: RequestStream[AudioOut | FinishedOut]
        async with self.engine.submit(next(self._keys), inp, inp.request_id) as stream:
            relay = asyncio.create_task(_relay(text, stream))
            try:
                while True:
                    out = await stream.next()
                    assert out is not None  # no timeout: next() waits for an output
                    if isinstance(out, FinishedOut):
                        self.metrics.get("omnimesh_queue_time_seconds").observe(out.queue_seconds)
                    yield out
                    if isinstance(out, FinishedOut):
                        return
            finally:
                # The talker may finish (EOS, max frames) before the thinker does. The relay is NOT cancelled:
                # cancelling a pending read of the request stream can end the call INTERNAL instead of with the
                # handler's status (grpc aio; ~30% of the time in tests/integration/talker). Once the handler
                # returns, the RPC is over and that read fails at once, which ends the relay quietly.
                relay.add_done_callback(_retrieve)


async def _relay(text: TextFeed, stream: RequestStream) -> None:
    """Moves thinker ids from the request stream into the engine; a bad message fails the request."""
    try:
        async for item in text:
            if item is None:
                stream.send(TextEnd(stream.key))
            elif item:
                stream.send(MoreText(stream.key, list(item)))
        stream.send(TextEnd(stream.key))  # a client that half-closes without text_end has no more text either
    except Exception as err:
        if stream.finished:
            return  # the request already ended (finished or cancelled): the RPC closing under the read is expected
        if not isinstance(err, OmniError):  # the request stream broke: end the request with it rather than lose it
            log.warning("reading the Speak request stream failed: %r", err)
        stream.fail(err)


def _retrieve(task: asyncio.Task) -> None:
    """Mark a finished relay's outcome as seen, so asyncio never logs it as an unretrieved error."""
    if not task.cancelled():
        task.exception()
