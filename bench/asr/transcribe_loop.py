"""Closed-loop Transcribe RPCs through the gateway (bench/thinker/gateway_loop.closed_loop with a Transcribe call)
and what one concurrency level reports from its records."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from bench.thinker.gateway_loop import closed_loop
from bench.thinker.workload import RequestRecord, percentile, summarize
from gateway.timeline import TIMING_TRAILER, parse_trailer
from omnimesh.v1 import common_pb2, omni_pb2, omni_pb2_grpc

# Forced, so the prompt ends in `language English<asr_text>` and every generated token is transcript, streamed as a
# text event. Unforced, random weights never write `<asr_text>`, and the gateway holds the whole answer back as the
# language header until the end: time to first text would equal the request's end.
LANGUAGE = "en"


def transcribe_request(wav: bytes, max_tokens: int, index: int) -> omni_pb2.TranscribeRequest:
    """Greedy, `max_tokens` with EOS ignored (Transcribe's sampling passes `ignore_eos` to the thinker)."""
    sampling = common_pb2.SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    audio = omni_pb2.Media(data=wav, mime_type="audio/wav")
    return omni_pb2.TranscribeRequest(request_id=f"bench-{index}", audio=audio, language=LANGUAGE, sampling=sampling)


class TranscribeCall:
    """Runs one Transcribe stream into its record; keeps each request's Usage (prompt and completion tokens) and the
    gateway's account of where its time went (the `omnimesh-timing` trailer, ms by phase and stage)."""

    def __init__(self) -> None:
        self.usage: dict[int, tuple[int, int]] = {}  # index -> (prompt_tokens, completion_tokens)
        self.timing: dict[int, dict[str, float]] = {}  # index -> ms by phase

    async def __call__(self, stub: omni_pb2_grpc.OmniStub, request: omni_pb2.TranscribeRequest,
                       rec: RequestRecord) -> None:
        call = stub.Transcribe(request)
        async for ev in call:
            kind = ev.WhichOneof("event")
            if kind == "text":
                rec.add(time.perf_counter(), len(ev.text.token_ids))
            elif kind == "usage":
                self.usage[rec.index] = (ev.usage.prompt_tokens, ev.usage.completion_tokens)
            elif kind == "error":
                raise RuntimeError(f"request {rec.index}: {ev.error.code} {ev.error.message}")
        rec.end = time.perf_counter()
        trailer = dict(await call.trailing_metadata() or ()).get(TIMING_TRAILER)
        if trailer:
            self.timing[rec.index] = parse_trailer(trailer)


def level_summary(records: list[RequestRecord], usage: dict[int, tuple[int, int]], concurrency: int,
                  timing: dict[int, dict[str, float]] | None = None) -> dict[str, Any]:
    """summarize()'s output tok/s, TTFT (here: request start -> first text event) and TPOT, plus requests/s over
    the measured window, end-to-end latency percentiles, every measured request's raw record with the gateway's
    timing, and that timing's p50 / p99 by phase (`gateway_timing_ms`)."""
    timing = timing or {}
    out = summarize(records, concurrency)
    measured = sorted((r for r in records if r.measured and r.end is not None), key=lambda r: r.index)
    if not measured:
        return out
    e2e = [(r.end - r.start) * 1e3 for r in measured]
    ttft = [(r.first - r.start) * 1e3 for r in measured if r.first is not None]
    window = out["window_s"]
    out.update(
        requests_per_s=len(measured) / window if window > 0 else None,
        latency_ms_p50=percentile(e2e, 50), latency_ms_p95=percentile(e2e, 95), latency_ms_p99=percentile(e2e, 99),
        ttft_ms_p95=percentile(ttft, 95),
        prompt_tokens=sorted({usage[r.index][0] for r in measured if r.index in usage}),
        completion_tokens=sorted({usage[r.index][1] for r in measured if r.index in usage}),
        raw=[{"index": r.index, "start_s": r.start - measured[0].start, "ttft_ms": _ms(r.first, r.start),
              "latency_ms": (r.end - r.start) * 1e3, "text_tokens": r.tokens, "text_events": len(r.token_times),
              "prompt_tokens": usage.get(r.index, (None, None))[0],
              "completion_tokens": usage.get(r.index, (None, None))[1],
              "gateway_timing_ms": timing.get(r.index)} for r in measured],
        gateway_timing_ms=timing_percentiles([timing[r.index] for r in measured if r.index in timing]),
    )
    return out


def timing_percentiles(timings: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """p50 and p99 of each phase's ms over the requests that report it, in the order the first report lists them."""
    names = list(dict.fromkeys(name for t in timings for name in t))
    return {name: {"p50": percentile(vals, 50), "p99": percentile(vals, 99)}
            for name in names if (vals := [t[name] for t in timings if name in t])}


def _ms(t: float | None, start: float) -> float | None:
    return None if t is None else (t - start) * 1e3


def run_level(address: str, make_request: Callable[[int], omni_pb2.TranscribeRequest], concurrency: int,
              warmup: int, measured: int, first_index: int) -> dict[str, Any]:
    """One closed-loop level; `next_index` is where the next level's (distinct) clips start."""
    call = TranscribeCall()
    records = asyncio.run(closed_loop(address, make_request, concurrency, warmup, measured, first_index, call=call))
    out = level_summary(records, call.usage, concurrency, call.timing)
    out.update(warmup_requests=warmup, next_index=first_index + len(records),
               started_requests=len(records))
    return out
