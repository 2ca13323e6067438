"""Engine-only runs: the thinker's Engine built in-process and driven by a closed loop of Engine.step calls."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from bench.thinker.workload import RequestRecord, summarize
from runtime.config import EngineConfig, SamplingDefaults
from runtime.engine.engine import Engine
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import ScheduledBatch
from runtime.engine.sequence import Sequence
from services.thinker.build import build_engine as build_thinker_engine
from services.thinker.model import ThinkerConfig, ThinkerLM, prompt_positions
from services.thinker.request import ThinkerRequest
from services.thinker.runner import ThinkerRunner


class TimedRunner:
    """ThinkerRunner with the time of each run() (device work included) kept, to split a step into its parts.

    It syncs after each run() and does not read pending tokens, so engine-only runs go one step at a time: their
    numbers are the engine without run-ahead; the gateway runs measure the served path, which runs ahead."""

    def __init__(self, runner: ThinkerRunner) -> None:
        self.inner = runner
        self.device = runner.device
        self.last_seconds = 0.0

    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        t0 = time.perf_counter()
        logits = self.inner.run(batch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # sampling syncs right after anyway
        self.last_seconds = time.perf_counter() - t0
        return logits

    def release(self, seq: Sequence) -> None:
        self.inner.release(seq)


@dataclass(frozen=True)
class StepRecord:
    seconds: float  # Engine.step wall time
    run_seconds: float  # of which the model (inputs, forward, logits)
    engine_seconds: float  # of which run + sampling + postprocess (the rest is scheduling)
    rows: int
    tokens: int
    kv_tokens: int  # cached tokens of the running sequences after the step


def build_engine(model: ThinkerLM, eng: EngineConfig, device: torch.device, dtype: torch.dtype) -> Engine:
    """What the thinker stage runs (services/thinker/build.py), minus the server, with every step timed."""
    return build_thinker_engine(model, eng, device, dtype, wrap_runner=TimedRunner).engine


def workload_sampling(sampling: str, max_tokens: int) -> SamplingOptions:
    """greedy (the comparable workload), or "model": what a request that sets no sampling field gets."""
    options = SamplingOptions(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    if sampling == "greedy":
        return options
    d = SamplingDefaults()
    return replace(options, temperature=d.temperature, top_k=d.top_k, top_p=d.top_p, min_p=d.min_p,
                   repetition_penalty=d.repetition_penalty)


def text_request(ids: list[int], cfg: ThinkerConfig) -> ThinkerRequest:
    """What the thinker stage makes of a text-only prompt: its M-RoPE positions."""
    pos = prompt_positions(ids, [], cfg)
    return ThinkerRequest(pos.positions, pos.rope_delta, [])


def text_sequence(index: int, ids: list[int], options: SamplingOptions, request: ThinkerRequest,
                  prefix: str = "bench") -> Sequence:
    """Sequence `index` of a workload; a sampled one seeded by its index, so a run repeats."""
    seeded = options if options.is_greedy else replace(options, seed=index)
    return Sequence(index, f"{prefix}-{index}", ids, seeded, frozenset(), request)


@dataclass
class DecodeTrace:
    """What a level's pure decode steps fed the model: per step its rows as (sequence id, position of the token fed
    in), and every sequence's tokens, so the routers' picks can be replayed (bench/thinker/routing_replay.py)."""

    steps: list[list[tuple[int, int]]] = field(default_factory=list)
    tokens: dict[int, list[int]] = field(default_factory=dict)


def closed_loop(engine: Engine, make_seq: Callable[[int], Sequence], concurrency: int, warmup: int,
                measured: int, first_index: int = 0,
                trace: DecodeTrace | None = None) -> tuple[list[RequestRecord], list[StepRecord]]:
    """Keep `concurrency` sequences in flight until the `measured` ones after `warmup` have finished; sequences
    still running then are aborted. Times are taken when Engine.step returns (its events are out by then)."""
    in_flight: dict[int, RequestRecord] = {}
    records: list[RequestRecord] = []
    steps: list[StepRecord] = []
    index = first_index
    remaining = measured
    while remaining > 0:
        while len(in_flight) < concurrency:
            seq = make_seq(index)
            rec = RequestRecord(index, time.perf_counter(), warmup <= index - first_index < warmup + measured)
            engine.add(seq)
            in_flight[seq.seq_id] = rec
            if trace is not None:
                trace.tokens[seq.seq_id] = list(seq.prompt_ids)
            records.append(rec)
            index += 1
        t0 = time.perf_counter()
        events, stats = engine.step()
        now = time.perf_counter()
        if trace is not None and stats is not None:
            _trace_step(trace, events, stats.num_rows, stats.num_tokens)
        for ev in events:
            rec = in_flight.get(ev.seq.seq_id)
            if rec is None:
                continue
            rec.add(now, int(ev.token_id is not None))
            if ev.finish_reason is not None:
                rec.end = now
                del in_flight[ev.seq.seq_id]
                remaining -= rec.measured
        if stats is not None:
            kv = sum(s.num_computed_tokens for s in engine.scheduler.running)
            steps.append(StepRecord(now - t0, engine.runner.last_seconds, stats.seconds, stats.num_rows,
                                    stats.num_tokens, kv))
    for seq_id in list(in_flight):
        engine.abort(seq_id)
    return records, steps


def _trace_step(trace: DecodeTrace, events: list[Any], rows: int, tokens: int) -> None:
    """Append this step's tokens; a pure decode step also records which position of each sequence it fed in."""
    fed = []
    for ev in events:
        if ev.token_id is None or ev.seq.seq_id not in trace.tokens:
            continue
        seq_tokens = trace.tokens[ev.seq.seq_id]
        fed.append((ev.seq.seq_id, len(seq_tokens) - 1))
        seq_tokens.append(ev.token_id)
    if rows == tokens and len(fed) == rows:
        trace.steps.append(fed)


def step_summary(steps: list[StepRecord], rows: int) -> dict[str, Any]:
    """Medians over pure decode steps of exactly `rows` rows: wall, model, sampling and scheduling parts."""
    decode = [s for s in steps if s.tokens == s.rows == rows]
    if not decode:
        return {"rows": rows, "steps": 0}

    def med(values: list[float]) -> float:
        return sorted(values)[len(values) // 2] * 1e3

    return {"rows": rows, "steps": len(decode), "step_ms_p50": med([s.seconds for s in decode]),
            "model_ms_p50": med([s.run_seconds for s in decode]),
            "sample_post_ms_p50": med([s.engine_seconds - s.run_seconds for s in decode]),
            "schedule_ms_p50": med([s.seconds - s.engine_seconds for s in decode]),
            "kv_tokens_p50": sorted(s.kv_tokens for s in decode)[len(decode) // 2]}


def run_level(engine: Engine, make_seq: Callable[[int], Sequence], concurrency: int, warmup: int, measured: int,
              first_index: int, trace: DecodeTrace | None = None) -> dict[str, Any]:
    records, steps = closed_loop(engine, make_seq, concurrency, warmup, measured, first_index, trace)
    out = summarize(records, concurrency)
    out["decode_steps"] = step_summary(steps, concurrency)
    out["steps"] = len(steps)
    out["next_index"] = first_index + len(records)
    return out
