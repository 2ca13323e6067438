"""Which waiting requests share the next talker prefill."""
from __future__ import annotations

from collections.abc import Iterable


def prefill_batch(lengths: Iterable[int | None], free_rows: int, max_tokens: int) -> list[int]:
    """Indices (in queue order) of the requests one prefill starts.

    `lengths` holds each waiting request's prefill length, None for one that cannot start yet (no thinker text).
    The prefill is right-padded to its longest prompt, so it costs rows x longest: requests join in order while
    that stays within `max_tokens` and rows are free. The first always joins, so one long prompt still starts;
    a request that does not fit ends the batch (it goes first next time rather than being overtaken).
    """
    taken: list[int] = []
    longest = 0
    for index, length in enumerate(lengths):
        if len(taken) == free_rows:
            break
        if length is None:
            continue
        if taken and max(longest, length) * (len(taken) + 1) > max_tokens:
            break
        taken.append(index)
        longest = max(longest, length)
    return taken
