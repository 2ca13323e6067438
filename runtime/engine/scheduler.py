"""Continuous batching: which sequences run this step and with how many tokens (pure Python)."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from runtime.engine.block_manager import BlockManager
from runtime.engine.sequence import FinishReason, Sequence, SequenceStatus
from runtime.engine.state_prefix import Snapshot, StatePrefixCache
from runtime.engine.state_slots import StateSlots

# A token the device is still drawing (see Scheduler.advance): never a real id, never sent anywhere
PENDING_TOKEN = -1


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int
    max_batch_tokens: int
    max_model_len: int


@dataclass(frozen=True)
class ScheduledRow:
    seq: Sequence
    num_tokens: int  # tokens computed this step, from seq.num_computed_tokens
    restore_from: int | None = None  # hybrid prefix hit: copy this state snapshot into the row's slot first
    snapshot: Snapshot | None = None  # hybrid: copy the row's state into a snapshot after this step

    @property
    def samples(self) -> bool:
        """Whether this step reaches the sequence's last token and so samples the next one."""
        return self.seq.num_computed_tokens + self.num_tokens == self.seq.num_tokens


@dataclass(frozen=True)
class ScheduledBatch:
    rows: list[ScheduledRow]
    num_preempted: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(r.num_tokens for r in self.rows)

    @property
    def is_empty(self) -> bool:
        return not self.rows


class Scheduler:
    """FCFS with chunked prefill under a token budget; decode rows first; preemption by recompute.

    Sequences join the running batch between steps and leave it when they finish or are aborted; their blocks
    return to the free list at once. A hybrid model's sequences also hold one of `slots` while running.
    """

    def __init__(self, limits: SchedulerLimits, blocks: BlockManager, slots: StateSlots | None = None,
                 state_prefix: StatePrefixCache | None = None) -> None:
        if slots is not None and blocks.enable_prefix_cache and state_prefix is None:
            raise ValueError("enable_prefix_cache: a hybrid model's cached KV blocks come without the linear-attention "
                             "state at their boundary; give it state snapshots or turn the prefix cache off")
        self.limits = limits
        self.blocks = blocks
        self.slots = slots
        self.state_prefix = state_prefix
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_prefix_queried_tokens = 0  # prompt tokens looked up in the prefix cache at admission
        self.num_prefix_hit_tokens = 0  # of those, found

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> ScheduledBatch:
        budget = self.limits.max_batch_tokens
        rows: list[ScheduledRow] = []
        preempted = 0
        # Decode rows before prefill chunks, so a long prompt never stalls streams already talking.
        for seq in sorted(self.running, key=lambda s: s.num_uncomputed_tokens > 1):
            if seq.status is not SequenceStatus.RUNNING or budget == 0:
                continue
            n = min(seq.num_uncomputed_tokens, budget)
            while not self.blocks.can_grow(seq, n):
                victim = self._latest_running(exclude=seq, scheduled=rows)
                if victim is None:
                    self._preempt(seq)
                    preempted += 1
                    break
                self._preempt(victim)
                preempted += 1
            if seq.status is not SequenceStatus.RUNNING:
                continue
            n, snapshot = self._cut(seq, n)
            self.blocks.grow(seq, n)
            rows.append(ScheduledRow(seq, n, snapshot=snapshot))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.limits.max_num_seqs:
            if self.slots is not None and self.slots.num_free == 0:
                break  # every state slot is held: admission waits for a finish, like it does for blocks
            seq = self.waiting[0]
            if self.state_prefix is not None:
                restore = self.state_prefix.match(seq)
            else:
                restore = None
                self.blocks.match_prefix(seq)
            n = min(seq.num_uncomputed_tokens, budget)
            if not self.blocks.can_grow(seq, n):
                self.blocks.free(seq)  # a waiting sequence must not pin cached blocks others could evict
                seq.num_computed_tokens = 0
                break
            self.waiting.popleft()
            if self.blocks.enable_prefix_cache and seq.allow_prefix_cache and seq.num_preemptions == 0:
                self.num_prefix_queried_tokens += seq.num_prompt_tokens
                self.num_prefix_hit_tokens += seq.num_cached_prompt_tokens
            seq.status = SequenceStatus.RUNNING
            if self.slots is not None:
                self.slots.allocate(seq)
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
            self.running.append(seq)
            n, snapshot = self._cut(seq, n)
            self.blocks.grow(seq, n)
            rows.append(ScheduledRow(seq, n, restore, snapshot))
            budget -= n
        return ScheduledBatch(rows, preempted)

    def _cut(self, seq: Sequence, n: int) -> tuple[int, Snapshot | None]:
        """A hybrid model's prefill chunk ends at its prompt's snapshot boundary (StatePrefixCache.cut)."""
        return (n, None) if self.state_prefix is None else self.state_prefix.cut(seq, n)

    def _latest_running(self, exclude: Sequence, scheduled: list[ScheduledRow]) -> Sequence | None:
        taken = {r.seq.seq_id for r in scheduled}
        for seq in reversed(self.running):
            if seq is not exclude and seq.seq_id not in taken:
                return seq
        return None

    def _preempt(self, seq: Sequence) -> None:
        """Frees the sequence's KV and state slot; it waits at the front and recomputes its tokens from the first
        when blocks free up."""
        self.blocks.free(seq)
        self._free_slot(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    def advance(self, batch: ScheduledBatch, sampling: list[Sequence]) -> list[Sequence]:
        """A launched step whose tokens are not read yet: count its tokens as computed and give each still-running
        sequence of `sampling` a PENDING_TOKEN for the token it is drawing, so the next step can be scheduled (and
        launched, reading that token on the device) before this one's tokens reach the host. `resolve` fills them
        in; returns the sequences that got one."""
        drawing = {s.seq_id for s in sampling}
        pending = []
        for row in batch.rows:
            seq = row.seq
            if seq.status is not SequenceStatus.RUNNING:
                continue  # aborted while the step ran
            seq.num_computed_tokens += row.num_tokens
            self.blocks.commit(seq)  # blocks full up to the computed tokens: the pending one is past them
            if row.snapshot is not None:
                self.state_prefix.bind(row.snapshot)
            if seq.seq_id in drawing:
                seq.output_ids.append(PENDING_TOKEN)
                pending.append(seq)
        return pending

    def resolve(self, pending: list[Sequence], sampled: dict[int, int]) -> None:
        """The tokens `advance` left pending (seq_id -> token): fill them in, and finish the sequences they end (a
        step scheduled meanwhile may hold them: its rows for them are dropped when it is resolved)."""
        for seq in pending:
            token = sampled[seq.seq_id]
            seq.output_ids[-1] = token
            reason = None if seq.is_finished else self._finish_reason(seq, token)
            if reason is not None:
                self.finish(seq, reason)

    def postprocess(self, batch: ScheduledBatch, sampled: dict[int, int]) -> list[Sequence]:
        """`advance` and `resolve` at once, the step's tokens (seq_id -> token) read already; returns the sequences
        that got a token."""
        pending = self.advance(batch, [r.seq for r in batch.rows if r.seq.seq_id in sampled])
        self.resolve(pending, sampled)
        return pending

    def _free_slot(self, seq: Sequence) -> None:
        if self.slots is not None:
            self.slots.free(seq)

    def _finish_reason(self, seq: Sequence, token: int) -> FinishReason | None:
        opts = seq.sampling
        if token in opts.stop_token_ids or (not opts.ignore_eos and token in seq.eos_token_ids):
            return FinishReason.STOP
        if len(seq.output_ids) >= opts.max_tokens or seq.num_tokens >= self.limits.max_model_len:
            return FinishReason.LENGTH
        return None

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Ends a sequence wherever it is and frees its blocks at once."""
        if seq.is_finished:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq)
        self._free_slot(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
