"""One engine step: schedule() -> run() -> postprocess(), with sampling in between."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from runtime.engine.sampler import RowGenerators, sample
from runtime.engine.scheduler import ScheduledBatch, Scheduler
from runtime.engine.sequence import FinishReason, Sequence


class ModelRunner(Protocol):
    """Runs the model on a scheduled batch."""

    device: torch.device

    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        """Logits [rows that sample, vocab] in batch order, float32."""
        ...

    def release(self, seq: Sequence) -> None:
        """Drops any per-sequence state the runner keeps (called when a sequence finishes or is aborted)."""
        ...


@dataclass(frozen=True)
class TokenEvent:
    """A sampled token, or the end of a sequence (token_id None when it ended without sampling, e.g. abort)."""

    seq: Sequence
    token_id: int | None
    logprob: float | None = None
    top_ids: list[int] | None = None
    top_logprobs: list[float] | None = None
    finish_reason: FinishReason | None = None


@dataclass(frozen=True)
class StepStats:
    seconds: float
    num_rows: int
    num_tokens: int
    num_preempted: int
    num_waiting: int
    num_running: int
    kv_usage_ratio: float
    prefix_queried_tokens: int = 0  # looked up in the prefix cache during this step's admissions
    prefix_hit_tokens: int = 0


class Engine:
    def __init__(self, scheduler: Scheduler, runner: ModelRunner) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self._generators = RowGenerators(runner.device)
        self._by_id: dict[int, Sequence] = {}

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def add(self, seq: Sequence) -> None:
        self._by_id[seq.seq_id] = seq
        self.scheduler.add(seq)

    def abort(self, seq_id: int) -> Sequence | None:
        """Ends a sequence now and frees its KV; returns it, or None if it already ended."""
        seq = self._by_id.pop(seq_id, None)
        if seq is None:
            return None
        self.scheduler.finish(seq, FinishReason.CANCELLED)
        self._release(seq)
        return seq

    def _release(self, seq: Sequence) -> None:
        self._generators.drop(seq.seq_id)
        self.runner.release(seq)

    def step(self) -> tuple[list[TokenEvent], StepStats | None]:
        queried, hits = self.scheduler.num_prefix_queried_tokens, self.scheduler.num_prefix_hit_tokens
        batch = self.scheduler.schedule()
        if batch.is_empty:
            return [], None
        t0 = time.perf_counter()
        logits = self.runner.run(batch)
        rows = [r for r in batch.rows if r.samples]
        seqs = [r.seq for r in rows]
        result = sample(
            logits,
            [s.sampling for s in seqs],
            [None if s.sampling.is_greedy else self._generators.get(s.seq_id, s.sampling.seed) for s in seqs],
            [s.prompt_ids + s.output_ids if s.sampling.repetition_penalty != 1.0 else [] for s in seqs],
            [s.output_ids for s in seqs],
        )
        sampled = {s.seq_id: t for s, t in zip(seqs, result.token_ids)}
        self.scheduler.postprocess(batch, sampled)
        events = []
        for i, seq in enumerate(seqs):
            if seq.seq_id not in self._by_id:
                continue  # aborted meanwhile
            events.append(TokenEvent(
                seq, result.token_ids[i],
                result.logprobs[i] if result.logprobs is not None and seq.sampling.logprobs else None,
                result.top_ids[i][: seq.sampling.top_logprobs]
                if result.top_ids and seq.sampling.top_logprobs else None,
                result.top_logprobs[i][: seq.sampling.top_logprobs]
                if result.top_logprobs and seq.sampling.top_logprobs else None,
                seq.finish_reason,
            ))
            if seq.is_finished:
                self._by_id.pop(seq.seq_id, None)
                self._release(seq)
        stats = StepStats(time.perf_counter() - t0, len(batch.rows), batch.num_tokens, batch.num_preempted,
                          len(self.scheduler.waiting), len(self.scheduler.running),
                          self.scheduler.blocks.usage_ratio,
                          self.scheduler.num_prefix_queried_tokens - queried,
                          self.scheduler.num_prefix_hit_tokens - hits)
        return events, stats
