"""One engine step: schedule() -> run() -> postprocess(), with sampling in between.

When the runner can read a token that is still on the device (`reads_pending_tokens`), a step runs one ahead: right
after step N is launched, the scheduler counts it done with a placeholder for each token it draws, step N+1 is
scheduled and launched (its rows read those tokens on the device), and only then are N's tokens read back and
turned into events. The host work of a step (read-back, stop checks, events, scheduling, packing, input copies)
then overlaps the GPU's next step instead of leaving the GPU idle. A row whose sequence ended at N is computed in
N+1 for nothing and dropped. Penalties count a row's pending token on the device.

Launched at once, step N+1 is queued before N has run: a request that arrives while N runs misses N+1 and waits for
N+2, a whole step more to its first token than without run-ahead. With `late_launch` the engine asks its loop to
wait, taking requests as they come, until just before N should end (N's start, plus the recent duration of decode
steps of its rows, less the host time a launch takes and a slack), then schedules and launches N+1 with them. Only
a decode-only step has such an estimate; a step with prefill tokens is followed at once, as without.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from runtime.engine.sampler import PendingSample, launch_sample
from runtime.engine.scheduler import PENDING_TOKEN, ScheduledBatch, Scheduler
from runtime.engine.sequence import FinishReason, Sequence
from runtime.engine.step_core import StepStats
from runtime.sampler.streams import RowGenerators


@dataclass(frozen=True)
class PendingTokens:
    """Tokens a launched step is still drawing: the one for sequence `seq_id` is `tokens[index[seq_id]]` (device).
    A runner that `reads_pending_tokens` takes this with a batch whose sequences end in PENDING_TOKEN."""

    tokens: torch.Tensor
    index: dict[int, int]


class ModelRunner(Protocol):
    """Runs the model on a scheduled batch. A runner with a true `reads_pending_tokens` attribute also takes
    `run(batch, pending)`, its batch's PENDING_TOKEN ids read from `pending` on the device."""

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


@dataclass
class _Launched:
    """A step on the device: its batch, the sequences of its sampling rows (logits order) and their draws."""

    batch: ScheduledBatch
    seqs: list[Sequence]
    draws: PendingSample
    started: float


# late_launch: the next step goes out this much before the running one's estimated end, beyond the host's launch
# time, so that a late wake-up of the engine thread or a step shorter than the estimate seldom idles the device
LATE_LAUNCH_SLACK_S = 0.0005
LATE_LAUNCH_SLACK_SHARE = 0.15  # of the estimated step, when that is more
_EMA = 0.25  # weight of the newest sample in the step and launch time estimates


class Engine:
    def __init__(self, scheduler: Scheduler, runner: ModelRunner, late_launch: bool = False) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self._generators = RowGenerators(runner.device)
        self._by_id: dict[int, Sequence] = {}
        self._run_ahead = bool(getattr(runner, "reads_pending_tokens", False))
        self._late_launch = late_launch and self._run_ahead
        self._decode_s: dict[int, float] = {}  # rows -> recent seconds of a decode-only step (late_launch)
        self._launch_s: float | None = None  # recent host seconds to schedule and launch a step ahead
        self._in_flight: _Launched | None = None  # launched by the last step(), its tokens not read yet
        self._read_at = 0.0  # when the last step's tokens were read: a step launched ahead of that ran after it
        self._prefix_counted = (0, 0)  # the scheduler's prefix-cache (queried, hit) tokens as last reported

    @property
    def has_work(self) -> bool:
        """Sequences to run, or a launched step whose tokens someone still waits for (not all of it aborted)."""
        flight = self._in_flight
        return self.scheduler.has_work or (flight is not None and any(not r.seq.is_finished for r in flight.batch.rows))

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
        """Reads one step's tokens and returns their events; with run-ahead, also leaves the next step launched."""
        launched, self._in_flight = self._in_flight, None
        # A step launched ahead whose rows all ended in the step before it: nobody waited for it (has_work is
        # False), so it may have sat until the next request came. It is read and dropped, and not reported as a
        # step: its "duration" would be that idle time (1.5 s "steps" between the waves of a speech benchmark).
        orphan = launched is not None and all(r.seq.is_finished for r in launched.batch.rows)
        if launched is None:
            launched = self._launch(self.scheduler.schedule(), None)
            if launched is None:
                return [], None
        if self._may_run_ahead(launched):
            scheduling = time.perf_counter()
            pending = self.scheduler.advance(launched.batch, launched.seqs)
            index = {s.seq_id: i for i, s in enumerate(launched.seqs)}
            self._in_flight = self._launch(self.scheduler.schedule(), PendingTokens(launched.draws.tokens, index))
            if self._late_launch:
                self._launch_s = _ema(self._launch_s, time.perf_counter() - scheduling)
            result = launched.draws.result()
            self.scheduler.resolve(pending, {s.seq_id: t for s, t in zip(launched.seqs, result.token_ids)})
        else:
            result = launched.draws.result()
            self.scheduler.postprocess(launched.batch, {s.seq_id: t for s, t in zip(launched.seqs, result.token_ids)})
        # A step launched ahead waited on the device for the one before it: timed from its launch it would read as
        # two steps (a c = 32 step of 20 ms showed as 40 on the dashboard), so it is timed from that one's read.
        read_at = time.perf_counter()
        seconds, self._read_at = read_at - max(launched.started, self._read_at), read_at
        events = []
        for i, seq in enumerate(launched.seqs):
            if seq.seq_id not in self._by_id:
                continue  # aborted meanwhile, or ended by an earlier step this one ran beside
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
        if orphan:
            return events, None  # the admissions it ran are counted with the next step reported
        batch = launched.batch
        if self._late_launch and _decode_only(batch):
            self._decode_s[len(batch.rows)] = _ema(self._decode_s.get(len(batch.rows)), seconds)
        (queried, hits), now = self._prefix_counted, (self.scheduler.num_prefix_queried_tokens,
                                                      self.scheduler.num_prefix_hit_tokens)
        self._prefix_counted = now
        stats = StepStats(seconds, len(batch.rows), batch.num_tokens,
                          batch.num_preempted, len(self.scheduler.waiting), len(self.scheduler.running),
                          self.scheduler.blocks.usage_ratio, now[0] - queried, now[1] - hits)
        return events, stats

    def _launch(self, batch: ScheduledBatch, pending: PendingTokens | None) -> _Launched | None:
        """Runs the model on `batch` and queues its draws; nothing waits for the device. None: an empty batch."""
        if batch.is_empty:
            return None
        started = time.perf_counter()
        logits = self.runner.run(batch) if pending is None else self.runner.run(batch, pending)  # type: ignore[call-arg]
        seqs = [r.seq for r in batch.rows if r.samples]
        histories, outputs, newest = [], [], []
        for s in seqs:
            done, last = s.output_ids, None
            if done and done[-1] == PENDING_TOKEN and s.sampling.needs_penalties:
                assert pending is not None
                done, last = done[:-1], pending.tokens[pending.index[s.seq_id]].view(1)  # the penalties read it there
            histories.append(s.prompt_ids + done if s.sampling.repetition_penalty != 1.0 else [])
            outputs.append(done)
            newest.append(last)
        generators = [None if s.sampling.is_greedy else self._generators.get(s.seq_id, s.sampling.seed) for s in seqs]
        draws = launch_sample(logits, [s.sampling for s in seqs], generators, histories, outputs, newest)
        return _Launched(batch, seqs, draws, started)

    def step_due_in(self) -> float:
        """Seconds until `step` should launch the next step (late_launch; see the module docstring), 0 for now."""
        launched = self._in_flight
        if not self._late_launch or launched is None or not self._may_run_ahead(launched):
            return 0.0
        estimate = self._decode_s.get(len(launched.batch.rows)) if _decode_only(launched.batch) else None
        if estimate is None:
            return 0.0
        started = max(launched.started, self._read_at)  # launched ahead, it began when the step before it ended
        slack = max(LATE_LAUNCH_SLACK_S, LATE_LAUNCH_SLACK_SHARE * estimate)
        return min(estimate, started + estimate - (self._launch_s or 0.0) - slack - time.perf_counter())

    def _may_run_ahead(self, launched: _Launched) -> bool:
        """Whether to schedule the next step before reading this one's tokens: the runner reads pending tokens and
        this step draws some (penalties count a pending token on the device: `apply_penalties`' `newest`)."""
        return self._run_ahead and bool(launched.seqs)


def _decode_only(batch: ScheduledBatch) -> bool:
    return batch.num_tokens == len(batch.rows)


def _ema(old: float | None, new: float) -> float:
    return new if old is None else old + _EMA * (new - old)
