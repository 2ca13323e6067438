"""Server-sent events (one JSON object per `data:` line), and reading an answer's events: a stream whose first
event was already read, a whole answer gathered."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Protocol, TypeVar

T = TypeVar("T")


class Gathers(Protocol):
    def add(self, event: object) -> object: ...


G = TypeVar("G", bound=Gathers)


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def prepend(first: T | None, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    """`first` (read early, so a refused request became an HTTP error before any byte was sent), then `rest`."""
    if first is not None:
        yield first
    async for item in rest:
        yield item


async def collect(into: G, events: AsyncIterator[object]) -> G:
    """Every event added to `into` (a Reply, a transcription's Result), which is returned."""
    async for event in events:
        into.add(event)
    return into
