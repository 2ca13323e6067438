"""Where a call's time went, as the gateway tells it: the `omnimesh-timing` trailer of an answered call (the
Server-Timing syntax: `name;dur=<ms>`, comma-separated), which the clients hand over as `Done.timing`. The names are
the gateway's phases in order (admit, decode, prompt, encode, first_token, rest), then each stage's own `queue` and
`compute` (`audio.queue`, `thinker.compute`, ...), then `total` (gateway/timeline.py)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

TIMING_TRAILER = "omnimesh-timing"


def format_timing(ms: Iterable[tuple[str, float]]) -> str:
    return ", ".join(f"{name};dur={value:.2f}" for name, value in ms)


def parse_timing(value: str) -> dict[str, float]:
    """format_timing's text back into milliseconds by name."""
    out: dict[str, float] = {}
    for item in value.split(","):
        name, _, dur = item.strip().partition(";dur=")
        out[name] = float(dur)
    return out


def first_token_ms(timing: Mapping[str, float]) -> float | None:
    """The call's start to the thinker's first tokens reaching the gateway: the phases up to `first_token`, which
    the trailer lists in order before anything else; None when it has none."""
    if "first_token" not in timing:
        return None
    names = list(timing)
    return sum(timing[name] for name in names[:names.index("first_token") + 1])


def trailer_timing(trailing_metadata: Iterable[tuple[str, Any]] | None) -> dict[str, float]:
    """The timing a call's trailing metadata carries; empty when the server sent none."""
    value = dict(trailing_metadata or ()).get(TIMING_TRAILER)
    return parse_timing(value) if value else {}


def timing_percentiles(timings: Iterable[Mapping[str, float] | None]) -> dict[str, dict[str, float]]:
    """p50 and p99 of each name's ms over the calls whose timing has it, in the order the names first appear (what a
    benchmark level reports)."""
    given = [t for t in timings if t]
    out = {}
    for name in dict.fromkeys(n for t in given for n in t):
        p50, p99 = np.percentile([t[name] for t in given if name in t], [50, 99])
        out[name] = {"p50": float(p50), "p99": float(p99)}
    return out
