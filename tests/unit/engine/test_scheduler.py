"""Scheduler: FCFS admission, limits, chunked prefill under a token budget, preemption by recompute, finishing."""
from __future__ import annotations

import pytest

from tests.unit.engine.engine_fakes import GREEDY, make_seq
from runtime.engine.block_manager import BlockManager
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import ScheduledBatch, Scheduler, SchedulerLimits
from runtime.engine.sequence import FinishReason, Sequence, SequenceStatus

EOS = 99


def make_scheduler(max_num_seqs: int = 8, max_batch_tokens: int = 64, max_model_len: int = 1000,
                   num_blocks: int = 64, block_size: int = 4, prefix_cache: bool = False) -> Scheduler:
    """Prefix cache off unless asked: these tests count exact blocks and recompute lengths."""
    return Scheduler(SchedulerLimits(max_num_seqs, max_batch_tokens, max_model_len),
                     BlockManager(num_blocks, block_size, enable_prefix_cache=prefix_cache))


def rows(batch: ScheduledBatch) -> list[tuple[int, int]]:
    return [(r.seq.seq_id, r.num_tokens) for r in batch.rows]


def step(sched: Scheduler, token: int = 5) -> ScheduledBatch:
    """schedule() then postprocess(), sampling `token` for every row that samples."""
    batch = sched.schedule()
    sched.postprocess(batch, {r.seq.seq_id: token for r in batch.rows if r.samples})
    return batch


def check_block_accounting(sched: Scheduler) -> None:
    """Each block's reference count is the number of running sequences holding it; free blocks are those at 0."""
    bm = sched.blocks
    holders = [0] * bm.num_blocks
    for s in sched.running:
        assert len(s.block_table) == len(set(s.block_table)), f"{s} holds a block twice"
        for block in s.block_table:
            holders[block] += 1
    assert holders == bm._refs
    assert sorted(bm._free) == [b for b in range(bm.num_blocks) if holders[b] == 0]
    if not bm.enable_prefix_cache:
        assert max(holders, default=0) <= 1
    assert all(not s.block_table for s in sched.waiting)


def test_fcfs_admission_in_arrival_order() -> None:
    sched = make_scheduler()
    a, b, c = make_seq(3), make_seq(2), make_seq(4)
    for s in (a, b, c):
        sched.add(s)
    assert sched.has_work
    batch = sched.schedule()
    assert rows(batch) == [(a.seq_id, 3), (b.seq_id, 2), (c.seq_id, 4)]
    assert all(r.samples for r in batch.rows)
    assert batch.num_tokens == 9 and not batch.is_empty and batch.num_preempted == 0
    assert sched.running == [a, b, c] and not sched.waiting
    assert all(s.status is SequenceStatus.RUNNING and s.first_scheduled_time is not None for s in (a, b, c))


def test_empty_scheduler_gives_an_empty_batch() -> None:
    sched = make_scheduler()
    assert not sched.has_work
    batch = sched.schedule()
    assert batch.is_empty and batch.num_tokens == 0


def test_max_num_seqs_caps_the_running_batch() -> None:
    sched = make_scheduler(max_num_seqs=2)
    a, b, c = (make_seq(2, SamplingOptions(temperature=0, max_tokens=1)) for _ in range(3))
    for s in (a, b, c):
        sched.add(s)
    batch = step(sched)
    assert [r.seq for r in batch.rows] == [a, b]
    assert list(sched.waiting) == [c] and c.status is SequenceStatus.WAITING
    # a and b finished on max_tokens=1: c joins on the next step.
    assert a.is_finished and b.is_finished
    assert [r.seq for r in step(sched).rows] == [c]


def test_long_prompt_is_chunked_under_the_token_budget() -> None:
    sched = make_scheduler(max_batch_tokens=4)
    seq = make_seq(10)
    sched.add(seq)
    plan = []
    for _ in range(3):
        batch = sched.schedule()
        plan.append((batch.rows[0].seq.num_computed_tokens, batch.rows[0].num_tokens, batch.rows[0].samples))
        sched.postprocess(batch, {seq.seq_id: 7} if batch.rows[0].samples else {})
    assert plan == [(0, 4, False), (4, 4, False), (8, 2, True)]
    assert seq.output_ids == [7] and seq.num_computed_tokens == 10
    batch = sched.schedule()  # decode: one token, the sampled one
    assert rows(batch) == [(seq.seq_id, 1)] and batch.rows[0].samples


def test_postprocess_without_a_sample_only_advances() -> None:
    sched = make_scheduler(max_batch_tokens=4)
    seq = make_seq(10)
    sched.add(seq)
    touched = step(sched)
    assert seq.num_computed_tokens == 4 and seq.output_ids == []
    assert touched.rows[0].seq is seq
    assert sched.postprocess(sched.schedule(), {}) == []


def test_decode_rows_ride_before_a_new_long_prompt() -> None:
    sched = make_scheduler(max_batch_tokens=4)
    talker = make_seq(2)
    sched.add(talker)
    step(sched)  # talker prefilled and sampled: now decoding
    long = make_seq(10)
    sched.add(long)
    for _ in range(3):
        batch = step(sched)
        assert batch.rows[0].seq is talker and batch.rows[0].num_tokens == 1
        assert batch.num_tokens <= 4
    assert long.num_computed_tokens == 9 and len(talker.output_ids) == 4


def test_decode_rows_are_scheduled_before_prefill_chunks_of_earlier_sequences() -> None:
    sched = make_scheduler(max_batch_tokens=4)
    prefilling, decoding = make_seq(10), make_seq(3)
    prefilling.num_computed_tokens = 4
    decoding.output_ids.append(8)
    decoding.num_computed_tokens = 3
    for s in (prefilling, decoding):
        s.status = SequenceStatus.RUNNING
        sched.blocks.grow(s, s.num_computed_tokens)
        sched.running.append(s)
    batch = sched.schedule()
    assert rows(batch) == [(decoding.seq_id, 1), (prefilling.seq_id, 3)]
    assert [r.samples for r in batch.rows] == [True, False]


def test_running_rows_beyond_the_budget_wait_a_step() -> None:
    sched = make_scheduler(max_batch_tokens=2)
    seqs = [make_seq(1) for _ in range(3)]
    for s in seqs:
        s.status = SequenceStatus.RUNNING
        sched.running.append(s)
    assert [r.seq for r in sched.schedule().rows] == seqs[:2]
    assert seqs[2] in sched.running and seqs[2].status is SequenceStatus.RUNNING and seqs[2].block_table == []
    waiting = make_seq(1)
    sched.add(waiting)
    assert sched.schedule().is_empty is False and list(sched.waiting) == [waiting]  # no budget left to admit


def test_waiting_head_that_does_not_fit_blocks_later_arrivals() -> None:
    sched = make_scheduler(num_blocks=2, block_size=4)
    holder = make_seq(4)
    sched.add(holder)
    step(sched)  # holder: 1 block, 1 free
    big, small = make_seq(8), make_seq(1)
    sched.add(big)
    sched.add(small)
    batch = sched.schedule()
    assert [r.seq for r in batch.rows] == [holder]
    assert list(sched.waiting) == [big, small]


def test_preemption_takes_the_latest_running_and_it_recomputes() -> None:
    sched = make_scheduler(num_blocks=2, block_size=4)
    first, last = make_seq(4), make_seq(4)
    sched.add(first)
    sched.add(last)
    step(sched, token=7)  # each holds its one full block; both now need a second
    assert sched.blocks.num_free_blocks == 0
    batch = step(sched, token=8)
    assert rows(batch) == [(first.seq_id, 1)] and batch.num_preempted == 1
    assert last.status is SequenceStatus.WAITING and list(sched.waiting) == [last]
    assert last.num_computed_tokens == 0 and last.block_table == [] and last.num_preemptions == 1
    assert last.output_ids == [7]  # sampled tokens survive; only their KV is recomputed
    check_block_accounting(sched)
    sched.finish(first, FinishReason.STOP)
    batch = sched.schedule()
    # The recompute row covers the prompt and the token sampled before preemption, and samples the next one.
    assert rows(batch) == [(last.seq_id, 5)] and batch.rows[0].samples
    sched.postprocess(batch, {last.seq_id: 9})
    assert last.output_ids == [7, 9] and last.num_computed_tokens == 5
    check_block_accounting(sched)


def test_a_row_with_nothing_to_preempt_preempts_itself() -> None:
    sched = make_scheduler(num_blocks=2, block_size=4)
    a, b = make_seq(4), make_seq(4)
    sched.add(a)
    sched.add(b)
    step(sched)
    # Make b the first decode row and a the latest: a is preempted for b, then nothing is left to give.
    sched.running.reverse()
    batch = sched.schedule()
    assert rows(batch) == [(b.seq_id, 1)] and batch.num_preempted == 1 and a.status is SequenceStatus.WAITING
    sched.postprocess(batch, {b.seq_id: 3})
    # Both b's blocks are full again; it needs a third block that the cache does not have.
    b.output_ids.extend([3, 3, 3])
    b.num_computed_tokens = 8
    batch = sched.schedule()
    assert batch.is_empty and batch.num_preempted == 1
    assert b.status is SequenceStatus.WAITING and b.num_preemptions == 1
    check_block_accounting(sched)


def test_preemption_never_takes_a_row_already_scheduled() -> None:
    sched = make_scheduler(num_blocks=3, block_size=4)
    a, b, c = make_seq(4), make_seq(4), make_seq(4)
    for s in (a, b, c):
        sched.add(s)
    step(sched)  # 3 blocks used, 0 free, all three decode next
    batch = sched.schedule()
    # a takes c's block; b then finds only a (scheduled) and itself, so it gives up its own.
    assert rows(batch) == [(a.seq_id, 1)]
    assert batch.num_preempted == 2
    assert list(sched.waiting) == [b, c]
    check_block_accounting(sched)


@pytest.mark.parametrize(("opts", "token", "reason"), [
    (SamplingOptions(temperature=0), EOS, FinishReason.STOP),
    (SamplingOptions(temperature=0, stop_token_ids=frozenset({42})), 42, FinishReason.STOP),
    (SamplingOptions(temperature=0, stop_token_ids=frozenset({42}), ignore_eos=True), 42, FinishReason.STOP),
    (SamplingOptions(temperature=0, ignore_eos=True), EOS, None),
    (SamplingOptions(temperature=0), 5, None),
    (SamplingOptions(temperature=0, max_tokens=1), 5, FinishReason.LENGTH),
])
def test_finish_reason_of_the_first_token(opts: SamplingOptions, token: int, reason: FinishReason | None) -> None:
    sched = make_scheduler()
    seq = make_seq(3, opts, eos=frozenset({EOS}))
    sched.add(seq)
    batch = sched.schedule()
    touched = sched.postprocess(batch, {seq.seq_id: token})
    assert touched == [seq] and seq.output_ids == [token]
    assert seq.finish_reason is reason
    assert seq.is_finished is (reason is not None)
    if reason is not None:
        assert seq not in sched.running and seq.block_table == [] and sched.blocks.num_free_blocks == 64


def test_stop_beats_length_on_the_same_token() -> None:
    sched = make_scheduler()
    seq = make_seq(3, SamplingOptions(temperature=0, max_tokens=1), eos=frozenset({EOS}))
    sched.add(seq)
    sched.postprocess(sched.schedule(), {seq.seq_id: EOS})
    assert seq.finish_reason is FinishReason.STOP


def test_max_tokens_counts_every_output_token() -> None:
    sched = make_scheduler()
    seq = make_seq(2, SamplingOptions(temperature=0, max_tokens=3))
    sched.add(seq)
    for _ in range(2):
        step(sched)
        assert not seq.is_finished
    step(sched)
    assert seq.finish_reason is FinishReason.LENGTH and len(seq.output_ids) == 3


def test_max_model_len_ends_with_length() -> None:
    sched = make_scheduler(max_model_len=5)
    seq = make_seq(3, SamplingOptions(temperature=0, max_tokens=100, ignore_eos=True))
    sched.add(seq)
    step(sched)
    assert not seq.is_finished
    step(sched)
    assert seq.finish_reason is FinishReason.LENGTH and seq.num_tokens == 5


@pytest.mark.parametrize("where", ["running", "waiting"])
def test_abort_frees_blocks_at_once(where: str) -> None:
    sched = make_scheduler(max_num_seqs=1, num_blocks=8)
    a, b = make_seq(6), make_seq(6)
    sched.add(a)
    sched.add(b)
    step(sched)
    seq = a if where == "running" else b
    assert sched.blocks.num_free_blocks == 6
    sched.finish(seq, FinishReason.CANCELLED)
    assert seq.is_finished and seq.finish_reason is FinishReason.CANCELLED and seq.block_table == []
    assert seq not in sched.running and seq not in sched.waiting
    assert sched.blocks.num_free_blocks == (8 if where == "running" else 6)
    sched.finish(seq, FinishReason.STOP)  # a second finish changes nothing
    assert seq.finish_reason is FinishReason.CANCELLED


def test_abort_while_the_step_runs_skips_the_row() -> None:
    sched = make_scheduler()
    seq = make_seq(3)
    sched.add(seq)
    batch = sched.schedule()
    sched.finish(seq, FinishReason.CANCELLED)
    assert sched.postprocess(batch, {seq.seq_id: 4}) == []
    assert seq.output_ids == [] and seq.num_computed_tokens == 0 and sched.blocks.num_free_blocks == 64
    assert not sched.has_work


def _drive_to_completion(sched: Scheduler, seqs: list[Sequence], max_steps: int = 500) -> int:
    for s in seqs:
        sched.add(s)
    steps = 0
    while sched.has_work:
        batch = sched.schedule()
        assert batch.num_tokens <= sched.limits.max_batch_tokens
        assert len(sched.running) <= sched.limits.max_num_seqs
        sampled = {r.seq.seq_id: (r.seq.num_tokens * 3) % 50 for r in batch.rows if r.samples}
        sched.postprocess(batch, sampled)
        check_block_accounting(sched)
        steps += 1
        assert steps < max_steps, "no progress"
    return steps


def test_many_sequences_under_pressure_all_finish_and_return_every_block() -> None:
    sched = make_scheduler(max_num_seqs=4, max_batch_tokens=8, num_blocks=8, block_size=4)
    seqs = [make_seq(n, SamplingOptions(temperature=0, max_tokens=m)) for n, m in
            [(5, 6), (9, 3), (2, 10), (13, 2), (1, 7), (7, 7)]]
    _drive_to_completion(sched, seqs)
    assert all(s.finish_reason is FinishReason.LENGTH for s in seqs)
    assert [len(s.output_ids) for s in seqs] == [6, 3, 10, 2, 7, 7]
    assert sched.blocks.num_free_blocks == 8
    assert any(s.num_preemptions for s in seqs)  # the cache was small enough to force recompute


# --- with the prefix cache --------------------------------------------------------------------------------------

def test_a_preempted_sequence_gets_its_own_full_blocks_back_from_the_prefix_cache() -> None:
    sched = make_scheduler(num_blocks=5, block_size=4, prefix_cache=True)
    first, last = make_seq(list(range(100, 108))), make_seq(list(range(200, 208)))
    sched.add(first)
    sched.add(last)
    step(sched, token=7)  # 2 full blocks each, named in the cache; 1 block free
    batch = step(sched, token=8)  # first takes the free block; last needs one and is preempted
    assert rows(batch) == [(first.seq_id, 1)] and last.num_preemptions == 1
    check_block_accounting(sched)
    sched.finish(first, FinishReason.STOP)
    batch = sched.schedule()
    # Its two full prompt blocks were freed but not evicted: only the token after them is recomputed.
    assert rows(batch) == [(last.seq_id, 1)] and batch.rows[0].samples
    assert last.num_computed_tokens == 8
    sched.postprocess(batch, {last.seq_id: 9})
    assert last.output_ids == [7, 9]
    check_block_accounting(sched)


def test_sequences_with_one_prompt_share_blocks_and_all_return_them() -> None:
    sched = make_scheduler(num_blocks=16, block_size=4, prefix_cache=True)
    prompt = list(range(300, 310))
    a = make_seq(prompt, SamplingOptions(temperature=0, max_tokens=3))
    sched.add(a)
    step(sched)
    b = make_seq(prompt, SamplingOptions(temperature=0, max_tokens=3))
    sched.add(b)
    batch = sched.schedule()
    assert rows(batch)[-1] == (b.seq_id, 2)  # 8 of 10 prompt tokens came from a's blocks
    assert b.block_table[:2] == a.block_table[:2] and b.num_cached_prompt_tokens == 8
    check_block_accounting(sched)
    sched.postprocess(batch, {r.seq.seq_id: 1 for r in batch.rows if r.samples})
    while sched.has_work:
        step(sched)
        check_block_accounting(sched)
    assert sched.blocks.num_free_blocks == 16
    assert sched.num_prefix_queried_tokens == 20 and sched.num_prefix_hit_tokens == 8


def test_a_waiting_head_that_cannot_fit_does_not_pin_cached_blocks() -> None:
    sched = make_scheduler(num_blocks=4, block_size=4, prefix_cache=True)
    holder = make_seq(list(range(12)), SamplingOptions(temperature=0, max_tokens=100))
    sched.add(holder)
    step(sched)  # 3 full blocks, named in the cache; the 1 free block goes to holder's next decode
    big = make_seq(list(range(8)) + list(range(50, 62)))  # shares 2 blocks, needs 3 more: does not fit
    sched.add(big)
    batch = sched.schedule()
    assert [r.seq for r in batch.rows] == [holder]
    assert big.block_table == [] and big.num_computed_tokens == 0 and list(sched.waiting) == [big]
    check_block_accounting(sched)


def test_many_sequences_with_shared_prefixes_under_pressure() -> None:
    sched = make_scheduler(max_num_seqs=4, max_batch_tokens=8, num_blocks=10, block_size=4, prefix_cache=True)
    common = list(range(400, 408))
    seqs = [make_seq(common + [i] * n, SamplingOptions(temperature=0, max_tokens=m))
            for i, (n, m) in enumerate([(1, 6), (5, 3), (0, 9), (9, 2), (2, 7), (3, 7)])]
    _drive_to_completion(sched, seqs)
    assert [len(s.output_ids) for s in seqs] == [6, 3, 9, 2, 7, 7]
    assert sched.blocks.num_free_blocks == 10 and sched.num_prefix_hit_tokens > 0


def test_greedy_default_sampling_options_are_used() -> None:
    assert GREEDY.is_greedy and not GREEDY.needs_penalties
