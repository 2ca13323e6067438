"""State slots of a hybrid model: one per running sequence, taken at admission, returned at finish, abort and
preemption; admission waits while none is free; never combined with the prefix cache."""
from __future__ import annotations

import pytest

from runtime.engine.block_manager import BlockManager
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import Scheduler, SchedulerLimits
from runtime.engine.sequence import FinishReason, Sequence, SequenceStatus
from runtime.engine.state_slots import StateSlots
from tests.unit.engine.engine_fakes import make_seq
from tests.unit.engine.test_scheduler import step


def seq(seq_id: int, prompt: list[int], max_tokens: int = 16) -> Sequence:
    return make_seq(prompt, SamplingOptions(temperature=0, max_tokens=max_tokens), seq_id=seq_id)


def make_scheduler(num_slots: int, num_blocks: int = 64, max_num_seqs: int = 8,
                   max_batch_tokens: int = 64) -> Scheduler:
    return Scheduler(SchedulerLimits(max_num_seqs, max_batch_tokens, 1000),
                     BlockManager(num_blocks, 4, enable_prefix_cache=False), StateSlots(num_slots))


def held(sched: Scheduler) -> list[int]:
    return sorted(s.state_slot for s in sched.running)


def test_allocate_and_free() -> None:
    slots = StateSlots(2)
    a, b = seq(0, [1, 2]), seq(1, [1, 2])
    assert (slots.allocate(a), slots.allocate(b), slots.allocate(a)) == (0, 1, 0)
    assert slots.num_free == 0
    with pytest.raises(RuntimeError, match="state slot"):
        slots.allocate(seq(2, [1]))
    slots.free(a)
    slots.free(a)  # twice is once
    assert (a.state_slot, slots.num_free) == (None, 1)
    with pytest.raises(ValueError, match="num_slots"):
        StateSlots(0)


def test_admission_waits_for_a_free_slot_and_the_slot_returns_at_finish() -> None:
    sched = make_scheduler(num_slots=2)
    seqs = [seq(i, [1, 2, 3], max_tokens=2) for i in range(3)]
    for s in seqs:
        sched.add(s)
    step(sched)
    assert [s.seq_id for s in sched.running] == [0, 1] and held(sched) == [0, 1]
    assert seqs[2].status is SequenceStatus.WAITING and seqs[2].state_slot is None
    step(sched)  # 0 and 1 reach max_tokens and give their slots back; 2 is admitted in the next step
    assert seqs[0].state_slot is None and seqs[1].state_slot is None
    step(sched)
    assert [s.seq_id for s in sched.running] == [2] and seqs[2].state_slot is not None


def test_abort_frees_the_slot() -> None:
    sched = make_scheduler(num_slots=1)
    a, b = seq(0, [1, 2]), seq(1, [1, 2])
    sched.add(a)
    sched.add(b)
    step(sched)
    sched.finish(a, FinishReason.CANCELLED)
    assert sched.slots.num_free == 1
    step(sched)
    assert b.state_slot == 0


def test_preemption_returns_the_victims_slot() -> None:
    # 3 blocks of 4 tokens: two 4-token prompts fit, then growth preempts the later one
    sched = make_scheduler(num_slots=2, num_blocks=3)
    a, b = seq(0, [1, 2, 3, 4], max_tokens=10), seq(1, [1, 2, 3, 4], max_tokens=10)
    sched.add(a)
    sched.add(b)
    step(sched)
    assert held(sched) == [0, 1]
    for _ in range(6):
        step(sched)
        if b.num_preemptions:
            break
    assert b.num_preemptions == 1 and b.state_slot is None and b.status is SequenceStatus.WAITING
    assert sched.slots.num_free == 1


def test_prefix_cache_is_refused_for_a_hybrid_scheduler() -> None:
    with pytest.raises(ValueError, match="enable_prefix_cache"):
        Scheduler(SchedulerLimits(8, 64, 1000), BlockManager(8, 4, enable_prefix_cache=True), StateSlots(2))


def test_config_sizes_slots_and_refuses_more_than_running_rows() -> None:
    from runtime.config import EngineConfig

    assert EngineConfig(max_num_seqs=8).state_slots == 8
    assert EngineConfig(max_num_seqs=8, num_state_slots=3).state_slots == 3
    with pytest.raises(ValueError, match="num_state_slots"):
        EngineConfig(max_num_seqs=2, num_state_slots=3)
