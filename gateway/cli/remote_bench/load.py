"""A closed loop at concurrency c (c requests in flight, the next starting as one ends; c warm-up requests, then
the measured ones) and what a level reports: output tok/s over the measured window, TTFT, ITL, end-to-end time and,
for speech, time to first audio and audio seconds per second (definitions: docs/benchmarks.md)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from omnimesh.timing import timing_percentiles


@dataclass
class Record:
    """One request as the client saw it. `texts` holds (arrival, tokens) per text event; an API that does not say
    how many tokens an event carried (OpenAI streams) gets its usage total spread evenly (`spread`)."""

    index: int
    start: float
    measured: bool
    texts: list[tuple[float, float]] = field(default_factory=list)
    first_audio: float | None = None
    audio_s: float = 0.0
    end: float | None = None
    timing: dict[str, float] | None = None  # the gateway's ms by phase (omnimesh/timing.py; gRPC only)

    def text(self, now: float, tokens: float) -> None:
        self.texts.append((now, tokens))

    def audio(self, now: float, seconds: float) -> None:
        if seconds > 0 and self.first_audio is None:
            self.first_audio = now
        self.audio_s += seconds

    def spread(self, total_tokens: int) -> None:
        if self.texts:
            share = total_tokens / len(self.texts)
            self.texts = [(t, share) for t, _ in self.texts]

    @property
    def tokens(self) -> float:
        return sum(n for _, n in self.texts)

    def itl(self) -> list[float]:
        """Gaps between text events, each split over the tokens its event carries (one value per token)."""
        out: list[float] = []
        for (t0, _), (t1, n) in zip(self.texts, self.texts[1:]):
            if n > 0:
                out += [(t1 - t0) / n] * max(1, round(n))
        return out


OneRequest = Callable[[int, Record], Awaitable[None]]  # sends request `index`, fills its record


async def closed_loop(one: OneRequest, concurrency: int, measured: int, first_index: int) -> list[Record]:
    """`concurrency` workers, the first `concurrency` requests a warm-up; requests still running once the measured
    ones are done only kept the load up, and are cancelled."""
    records: list[Record] = []
    counter = iter(range(first_index, first_index + 10**9))
    warmup = concurrency
    remaining = [measured]
    done = asyncio.Event()

    async def worker() -> None:
        while not done.is_set():
            index = next(counter)
            rec = Record(index, time.perf_counter(), warmup <= index - first_index < warmup + measured)
            records.append(rec)
            await one(index, rec)
            rec.end = time.perf_counter()
            if rec.measured:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    finished = asyncio.create_task(done.wait())
    await asyncio.wait([finished, *tasks], return_when=asyncio.FIRST_COMPLETED)
    failed = next((t for t in tasks if t.done() and t.exception() is not None), None)
    for t in (*tasks, finished):
        t.cancel()
    await asyncio.gather(*tasks, finished, return_exceptions=True)
    if failed is not None:
        raise failed.exception()
    return records


def summarize(records: list[Record], concurrency: int) -> dict[str, Any]:
    """Tokens (and audio seconds) arriving in the measured window, from every request running in it, over the
    window; latencies of the measured requests, medians and p99 (ITL pooled over their tokens)."""
    measured = [r for r in records if r.measured and r.end is not None]
    t0, t1 = min(r.start for r in measured), max(r.end for r in measured)
    window = t1 - t0
    tokens = sum(n for r in records for t, n in r.texts if t0 <= t <= t1)
    ttft = [r.texts[0][0] - r.start for r in measured if r.texts]
    out = {"concurrency": concurrency, "requests": len(measured), "window_s": window,
           "output_tokens": round(tokens), "output_tok_s": tokens / window,
           **_quantiles("ttft_ms", ttft), **_quantiles("itl_ms", [g for r in measured for g in r.itl()]),
           **_quantiles("e2e_ms", [r.end - r.start for r in measured]),
           **_quantiles("request_tok_s", [r.tokens / (r.end - r.start) for r in measured], scale=1.0)}
    if any(r.audio_s for r in measured):
        out |= {"audio_s_per_s": sum(r.audio_s for r in measured) / window,
                **_quantiles("ttfa_ms", [r.first_audio - r.start for r in measured if r.first_audio is not None]),
                **_quantiles("rtf", [(r.end - r.start) / r.audio_s for r in measured if r.audio_s], scale=1.0)}
    if any(r.timing for r in measured):
        out["gateway_timing_ms"] = timing_percentiles(r.timing for r in measured)
    out["raw"] = [{"index": r.index, "ttft_ms": 1e3 * (r.texts[0][0] - r.start) if r.texts else None,
                   "e2e_ms": 1e3 * (r.end - r.start), "tokens": round(r.tokens), "audio_s": r.audio_s,
                   **({"gateway_timing_ms": r.timing} if r.timing else {})} for r in measured]
    return out


def _quantiles(name: str, values: list[float], scale: float = 1e3) -> dict[str, float | None]:
    if not values:
        return {f"{name}_p50": None, f"{name}_p99": None}
    p50, p99 = np.percentile(np.asarray(values) * scale, [50, 99])
    return {f"{name}_p50": float(p50), f"{name}_p99": float(p99)}
