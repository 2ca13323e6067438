"""Server-sent events: one JSON object per `data:` line, and a stream whose first event was already read."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def prepend(first: T | None, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    """`first` (read early, so a refused request became an HTTP error before any byte was sent), then `rest`."""
    if first is not None:
        yield first
    async for item in rest:
        yield item
