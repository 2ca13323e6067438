"""The token engine as a StepCore on EngineLoop: each sequence its own events, abort frees KV, a dead engine frees
every sequence's blocks and fails its streams, one post per step."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import torch

from runtime.engine.block_manager import BlockManager
from runtime.engine.engine import Engine, PendingTokens, StepStats, TokenEvent
from runtime.engine.engine_loop import EngineLoop
from runtime.engine.request_stream import RequestStream
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import ScheduledBatch, Scheduler, SchedulerLimits
from runtime.engine.sequence import FinishReason, Sequence
from runtime.engine.state_slots import StateSlots
from runtime.engine.step_core import Abort, Add
from runtime.engine.token_core import TokenCore
from runtime.errors import Unavailable
from runtime.metrics import Metrics
from runtime.engine.step_metrics import bind_engine_metrics
from tests.unit.engine.engine_fakes import FakeRunner, make_seq
from tests.unit.engine.test_engine import PROMPTS, VOCAB, alone, greedy

LONG = SamplingOptions(temperature=0.0, max_tokens=10_000, ignore_eos=True)


class SlowRunner(FakeRunner):
    """Sleeps a little per step, so a test can act between steps; can be told to fail."""

    def __init__(self, blocks: BlockManager, delay: float = 0.002) -> None:
        super().__init__(blocks, VOCAB)
        self.delay = delay
        self.fail_at_step: int | None = None

    def run(self, batch: ScheduledBatch, pending: PendingTokens | None = None) -> torch.Tensor:
        if self.fail_at_step is not None and len(self.batches) >= self.fail_at_step:
            raise RuntimeError("device lost")
        time.sleep(self.delay)
        return super().run(batch, pending)


def make_loop(delay: float = 0.002) -> tuple[EngineLoop, SlowRunner, list[StepStats]]:
    blocks = BlockManager(64, 4)
    runner = SlowRunner(blocks, delay)
    sched = Scheduler(SchedulerLimits(8, 64, 1000), blocks)
    steps: list[StepStats] = []
    return EngineLoop(TokenCore(Engine(sched, runner)), on_step=steps.append), runner, steps


def submit(loop: EngineLoop, seq: Sequence) -> RequestStream[TokenEvent]:
    return loop.submit(seq.seq_id, seq, seq.request_id)


async def collect(stream: RequestStream[TokenEvent], timeout: float = 10.0) -> list[TokenEvent]:
    out = []
    while True:
        ev = await stream.next(timeout)
        assert ev is not None, "stream stalled"
        out.append(ev)
        if ev.finish_reason is not None:
            return out


def blocks_of(loop: EngineLoop) -> BlockManager:
    return loop.core.engine.scheduler.blocks  # type: ignore[attr-defined]


def test_each_sequence_streams_its_own_events() -> None:
    loop, _, steps = make_loop()

    async def main() -> list[list[TokenEvent]]:
        seqs = [make_seq(p, greedy(4 + i)) for i, p in enumerate(PROMPTS[:3])]
        streams = [submit(loop, s) for s in seqs]
        results = await asyncio.gather(*(collect(st) for st in streams))
        assert all(st.finished for st in streams)
        return results

    try:
        results = asyncio.run(main())
    finally:
        loop.close()
    for i, (p, evs) in enumerate(zip(PROMPTS[:3], results)):
        assert [e.token_id for e in evs] == alone(p, greedy(4 + i))
        assert evs[-1].finish_reason is FinishReason.LENGTH
    assert steps and all(s.kv_usage_ratio is not None for s in steps)
    assert not loop.is_alive and loop.failure is None and loop.core.load().num_running == 0


def test_closing_a_stream_early_aborts_and_frees_its_blocks() -> None:
    loop, runner, _ = make_loop(delay=0.01)
    seq = make_seq([1, 2, 3], LONG)

    async def main() -> None:
        async with submit(loop, seq) as stream:
            first = await stream.next(5.0)
            assert first is not None and first.token_id is not None
        end = time.monotonic() + 5.0
        while not (seq.is_finished and blocks_of(loop).num_free_blocks == 64):
            assert time.monotonic() < end, "abort never applied"
            await asyncio.sleep(0.005)

    try:
        asyncio.run(main())
        assert seq.finish_reason is FinishReason.CANCELLED and runner.released == [seq.seq_id]
    finally:
        loop.close()


def test_a_dead_engine_frees_every_sequence_and_fails_every_stream() -> None:
    loop, runner, _ = make_loop()
    runner.fail_at_step = 3

    async def main() -> None:
        streams = [submit(loop, make_seq([i + 1], LONG)) for i in range(3)]
        for s in streams:
            with pytest.raises(Unavailable, match="the thinker engine has failed: RuntimeError"):
                await collect(s)
        with pytest.raises(Unavailable, match="device lost"):
            await submit(loop, make_seq([2], greedy(5))).next(0.5)

    try:
        asyncio.run(main())
    finally:
        loop.close()
    assert isinstance(loop.failure, RuntimeError) and not loop.is_alive
    assert blocks_of(loop).num_free_blocks == 64 and loop.core.load().num_running == 0


def test_a_step_reaches_the_event_loop_in_one_call_for_all_its_sequences() -> None:
    loop, _, steps = make_loop()
    posts: list[int] = []

    async def main() -> list[list[TokenEvent]]:
        aio = asyncio.get_running_loop()
        post = aio.call_soon_threadsafe

        def counting(callback: Callable[..., object], *args: object) -> asyncio.Handle:
            posts.append(len(args[0]) if args else 0)
            return post(callback, *args)

        aio.call_soon_threadsafe = counting  # type: ignore[method-assign]
        streams = [submit(loop, make_seq([i + 1, i + 2], SamplingOptions(temperature=0.0, max_tokens=6)))
                   for i in range(4)]
        return await asyncio.gather(*(collect(s) for s in streams))

    try:
        results = asyncio.run(main())
    finally:
        loop.close()
    events = sum(len(r) for r in results)
    assert events == 4 * 6 and all(r[-1].finish_reason is FinishReason.LENGTH for r in results)
    assert len(posts) <= len(steps) and sum(posts) == events and max(posts) == 4


def test_the_core_takes_only_add_and_abort_keyed_by_seq_id() -> None:
    core = TokenCore(Engine(Scheduler(SchedulerLimits(8, 64, 1000), BlockManager(64, 4)),
                            FakeRunner(BlockManager(64, 4), VOCAB)))
    seq = make_seq([1, 2])
    with pytest.raises(AssertionError, match="seq_id"):
        core.apply(Add(seq.seq_id + 1, seq))
    with pytest.raises(TypeError, match="Add and Abort"):
        core.apply("more text")
    core.apply(Add(seq.seq_id, seq))
    assert core.has_work and core.load().num_waiting == 1
    core.apply(Abort(seq.seq_id))
    core.apply(Abort(seq.seq_id))  # twice, or a key it never had: ignored
    assert not core.has_work and seq.finish_reason is FinishReason.CANCELLED


def test_load_and_the_gauge_count_a_hybrid_models_state_slots_and_nothing_for_others() -> None:
    blocks = BlockManager(64, 4, enable_prefix_cache=False)
    core = TokenCore(Engine(Scheduler(SchedulerLimits(8, 64, 1000), blocks, StateSlots(4)), FakeRunner(blocks, VOCAB)))
    metrics = Metrics("thinker", "t")
    bind_engine_metrics(metrics, core)

    def gauge() -> float | None:  # read when scraped
        labels = {"stage": "thinker", "replica": "t", "model_name": ""}
        return metrics.registry.get_sample_value("omnimesh_state_slot_usage_ratio", labels)

    seqs = [make_seq([1, 2, 3], LONG) for _ in range(3)]
    for seq in seqs:
        core.apply(Add(seq.seq_id, seq))
    assert core.load().state_usage_ratio == 0.0 and gauge() == 0.0  # waiting: no slot yet
    core.step()
    assert core.load().state_usage_ratio == 0.75 and gauge() == 0.75
    core.apply(Abort(seqs[0].seq_id))
    assert core.load().state_usage_ratio == 0.5 and gauge() == 0.5
    plain = BlockManager(64, 4)
    assert TokenCore(Engine(Scheduler(SchedulerLimits(8, 64, 1000), plain), FakeRunner(plain, VOCAB))
                     ).load().state_usage_ratio is None
