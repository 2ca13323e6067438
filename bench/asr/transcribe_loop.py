"""Closed-loop Transcribe RPCs through the gateway (bench/thinker/gateway_loop.closed_loop with a Transcribe call)
and what one concurrency level reports from its records."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from bench.thinker.gateway_loop import closed_loop
from bench.thinker.workload import RequestRecord, percentile, read_timing, summarize
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
    """Runs one Transcribe stream into its record (with the gateway's timing of it); keeps each request's Usage
    (prompt and completion tokens)."""

    def __init__(self) -> None:
        self.usage: dict[int, tuple[int, int]] = {}  # index -> (prompt_tokens, completion_tokens)

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
        await read_timing(call, rec)


def level_summary(records: list[RequestRecord], usage: dict[int, tuple[int, int]], concurrency: int
                  ) -> dict[str, Any]:
    """summarize()'s output tok/s, TTFT (here: request start -> first text event), TPOT and the gateway's timing
    by phase, plus requests/s over the measured window, end-to-end latency percentiles and every measured request's
    raw record."""
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
              "gateway_timing_ms": r.timing} for r in measured],
    )
    return out


def _ms(t: float | None, start: float) -> float | None:
    return None if t is None else (t - start) * 1e3


def run_level(address: str, make_request: Callable[[int], omni_pb2.TranscribeRequest], concurrency: int,
              warmup: int, measured: int, first_index: int, channels: int = 1) -> dict[str, Any]:
    """One closed-loop level; `next_index` is where the next level's (distinct) clips start."""
    call = TranscribeCall()
    records = asyncio.run(closed_loop(address, make_request, concurrency, warmup, measured, first_index, call=call,
                                      channels=channels))
    out = level_summary(records, call.usage, concurrency)
    out.update(warmup_requests=warmup, next_index=first_index + len(records),
               started_requests=len(records))
    return out
