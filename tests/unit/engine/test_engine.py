"""Engine over a fake ModelRunner: tokens, events, preemption, seeds, abort, metrics."""
from __future__ import annotations

import random
import time

import pytest
import torch

from runtime.engine.block_manager import BlockManager
from runtime.engine import engine as engine_module
from runtime.engine.engine import Engine, PendingTokens, StepStats, TokenEvent
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import ScheduledBatch, Scheduler, SchedulerLimits
from runtime.engine.sequence import FinishReason, Sequence
from runtime.engine.step_metrics import bind_engine_metrics
from runtime.engine.token_core import TokenCore
from runtime.metrics import Metrics
from tests.unit.engine.engine_fakes import FakeRunner, make_seq

VOCAB = 50


def make_engine(max_num_seqs: int = 8, max_batch_tokens: int = 64, max_model_len: int = 1000,
                num_blocks: int = 64, block_size: int = 4, prefix_cache: bool = True,
                run_ahead: bool = True) -> tuple[Engine, FakeRunner]:
    """run_ahead: the runner reads pending tokens, so each step is launched before the last one's tokens are read."""
    blocks = BlockManager(num_blocks, block_size, enable_prefix_cache=prefix_cache)
    runner = FakeRunner(blocks, VOCAB, run_ahead=run_ahead)
    sched = Scheduler(SchedulerLimits(max_num_seqs, max_batch_tokens, max_model_len), blocks)
    return Engine(sched, runner), runner


def run_all(engine: Engine, seqs: list[Sequence], max_steps: int = 1000) -> dict[int, list[TokenEvent]]:
    for s in seqs:
        engine.add(s)
    events: dict[int, list[TokenEvent]] = {s.seq_id: [] for s in seqs}
    steps = 0
    while engine.has_work:
        evs, _ = engine.step()
        for ev in evs:
            events[ev.seq.seq_id].append(ev)
        steps += 1
        assert steps < max_steps, "engine made no progress"
    return events


def alone(prompt: list[int], opts: SamplingOptions) -> list[int]:
    """The tokens a sequence gets with the engine to itself, plenty of KV, no prefix cache, one step at a time (the
    other tests' engines run one step ahead)."""
    engine, _ = make_engine(prefix_cache=False, run_ahead=False)
    seq = make_seq(prompt, opts)
    run_all(engine, [seq])
    return seq.output_ids


PROMPTS = [list(range(1, 6)), [7, 3, 9], list(range(10, 23)), [4], [8, 8, 8, 8, 8, 8, 8]]


def greedy(max_tokens: int) -> SamplingOptions:
    return SamplingOptions(temperature=0.0, max_tokens=max_tokens)


def test_greedy_tokens_follow_the_model() -> None:
    engine, runner = make_engine()
    seq = make_seq([1, 2, 3], greedy(6))
    events = run_all(engine, [seq])[seq.seq_id]
    history = [1, 2, 3]
    for _ in range(6):
        history.append(int(runner.logits(history).argmax()))
    assert seq.output_ids == history[3:]
    assert [e.token_id for e in events] == seq.output_ids
    assert [e.finish_reason for e in events] == [None] * 5 + [FinishReason.LENGTH]
    assert runner.released == [seq.seq_id]
    assert engine.scheduler.blocks.num_free_blocks == 64


def test_a_prompt_longer_than_the_token_budget_prefills_over_several_steps() -> None:
    engine, runner = make_engine(max_batch_tokens=4)
    seq = make_seq(list(range(1, 12)), greedy(3))
    events = run_all(engine, [seq])[seq.seq_id]
    assert seq.output_ids == alone(list(range(1, 12)), greedy(3))
    assert [b[0][1:] for b in runner.batches[:3]] == [(0, 4), (4, 4), (8, 3)]
    assert len(events) == 3


def test_batched_greedy_equals_alone() -> None:
    engine, _ = make_engine(max_num_seqs=3, max_batch_tokens=8)
    seqs = [make_seq(p, greedy(5 + i)) for i, p in enumerate(PROMPTS)]
    run_all(engine, seqs)
    for p, s, i in zip(PROMPTS, seqs, range(5)):
        assert s.output_ids == alone(p, greedy(5 + i))


@pytest.mark.parametrize("prefix_cache", [False, True], ids=["plain", "prefix_cache"])
def test_preempted_sequences_recompute_and_finish_with_the_right_tokens(prefix_cache: bool) -> None:
    engine, runner = make_engine(max_num_seqs=4, max_batch_tokens=16, num_blocks=9, block_size=4,
                                 prefix_cache=prefix_cache)
    seqs = [make_seq(p, greedy(8)) for p in PROMPTS]
    events = run_all(engine, seqs)
    assert any(s.num_preemptions > 0 for s in seqs), "the test must force preemption"
    if not prefix_cache:
        recomputes = [(sid, start, n) for b in runner.batches for sid, start, n in b if start == 0 and n > 0]
        assert len(recomputes) > len(seqs)  # first prefills plus recomputes
    for p, s in zip(PROMPTS, seqs):
        assert s.output_ids == alone(p, greedy(8))
        assert [e.token_id for e in events[s.seq_id]] == s.output_ids  # one event per token, none repeated
    assert engine.scheduler.blocks.num_free_blocks == 9
    assert runner.pending_reads > 0  # steps did run ahead, preemptions among them


def test_running_ahead_wastes_only_the_rows_of_sequences_that_just_ended() -> None:
    """Each step beyond a sequence's last token is launched before the engine knows it ended: one computed row per
    sequence at most, whose draw no one sees."""
    engine, runner = make_engine()
    lengths = [3, 5, 8]
    seqs = [make_seq(p, greedy(n)) for p, n in zip(PROMPTS, lengths)]
    events = run_all(engine, seqs)
    rows = {s.seq_id: sum(1 for b in runner.batches for sid, _, _ in b if sid == s.seq_id) for s in seqs}
    for s, n in zip(seqs, lengths):
        assert [e.token_id for e in events[s.seq_id]] == s.output_ids and len(s.output_ids) == n
        assert n <= rows[s.seq_id] <= n + 1  # a prefill, n - 1 decodes, and at most one row for nothing
    assert engine.scheduler.blocks.num_free_blocks == 64 and not engine.has_work


def test_aborting_one_sequence_of_a_step_in_flight_leaves_the_others_right() -> None:
    """Aborted between steps, a sequence's row in the step already launched is computed for nothing: no event of
    it after the abort, and the sequences beside it get their own tokens."""
    engine, runner = make_engine()
    keep, drop = make_seq(PROMPTS[0], greedy(6)), make_seq(PROMPTS[1], greedy(6))
    engine.add(keep)
    engine.add(drop)
    seen: dict[int, list[int]] = {keep.seq_id: [], drop.seq_id: []}
    for _ in range(2):
        for ev in engine.step()[0]:
            seen[ev.seq.seq_id].append(ev.token_id)
    assert any(sid == drop.seq_id for sid, _, _ in runner.batches[-1])  # launched, tokens not read yet
    engine.abort(drop.seq_id)
    while engine.has_work:
        for ev in engine.step()[0]:
            seen[ev.seq.seq_id].append(ev.token_id)
    assert seen[drop.seq_id] == drop.output_ids[:len(seen[drop.seq_id])] and len(seen[drop.seq_id]) == 2
    assert seen[keep.seq_id] == keep.output_ids == alone(PROMPTS[0], greedy(6))
    assert engine.scheduler.blocks.num_free_blocks == 64


def test_a_sequence_ending_at_the_model_length_runs_ahead_past_it_harmlessly() -> None:
    """The step launched beside a sequence's last token computes one position past the model length for nothing."""
    limit = 12
    engine, _ = make_engine(max_model_len=limit)
    seq = make_seq(PROMPTS[0], greedy(100))
    run_all(engine, [seq])
    solo, _ = make_engine(max_model_len=limit, run_ahead=False)
    ref = make_seq(PROMPTS[0], greedy(100))
    run_all(solo, [ref])
    assert seq.finish_reason is FinishReason.LENGTH and seq.num_tokens == limit and seq.output_ids == ref.output_ids
    assert engine.scheduler.blocks.num_free_blocks == 64


@pytest.mark.parametrize("opts", [
    SamplingOptions(temperature=0.0, repetition_penalty=1.3, max_tokens=6),
    SamplingOptions(temperature=0.0, presence_penalty=0.8, frequency_penalty=0.6, max_tokens=6),
    SamplingOptions(temperature=1.0, seed=5, repetition_penalty=0.7, frequency_penalty=0.3, max_tokens=6),
], ids=["repetition", "presence-frequency", "sampled"])
def test_penalties_run_ahead_counting_the_pending_token(opts: SamplingOptions) -> None:
    """Penalties read a row's history; running ahead, its newest token is still on the device and counted there:
    the tokens are those of the engine without run-ahead."""
    engine, runner = make_engine()
    seqs = [make_seq(p, opts) for p in PROMPTS[:3]]
    run_all(engine, seqs)
    assert runner.pending_reads > 0
    for p, s in zip(PROMPTS, seqs):
        assert s.output_ids == alone(p, opts)


@pytest.mark.parametrize("prefix_cache", [False, True], ids=["plain", "prefix_cache"])
def test_seeded_sampling_is_the_same_alone_batched_and_preempted(prefix_cache: bool) -> None:
    opts = [SamplingOptions(temperature=1.0, seed=100 + i, max_tokens=8) for i in range(len(PROMPTS))]
    engine, _ = make_engine(max_num_seqs=4, max_batch_tokens=16, num_blocks=9, block_size=4,
                            prefix_cache=prefix_cache)
    seqs = [make_seq(p, o) for p, o in zip(PROMPTS, opts)]
    run_all(engine, seqs)
    assert any(s.num_preemptions > 0 for s in seqs)
    for p, s, o in zip(PROMPTS, seqs, opts):
        assert s.output_ids == alone(p, o)


def test_shared_prefixes_reuse_kv_and_keep_every_token_right() -> None:
    engine, runner = make_engine(max_num_seqs=3, max_batch_tokens=12, num_blocks=12, block_size=4)
    common = list(range(30, 42))
    prompts = [common + [i] * (i + 1) for i in range(5)] + [common]
    seqs = [make_seq(p, greedy(6)) for p in prompts]
    run_all(engine, seqs)
    for p, s in zip(prompts, seqs):
        assert s.output_ids == alone(p, greedy(6))
    computed = sum(n for b in runner.batches for _, _, n in b)
    assert computed < sum(len(p) + 5 for p in prompts)  # cached blocks were not recomputed
    assert sum(s.num_cached_prompt_tokens for s in seqs) > 0
    assert engine.scheduler.blocks.num_free_blocks == 12


def test_different_seeds_give_different_tokens() -> None:
    prompt = [5, 6, 7]
    outs = {tuple(alone(prompt, SamplingOptions(temperature=2.0, seed=s, max_tokens=10))) for s in range(4)}
    assert len(outs) == 4


def test_stop_on_eos_and_on_a_stop_id() -> None:
    _, runner = make_engine()
    prompt = [1, 2, 3]
    ref = alone(prompt, greedy(6))
    engine, _ = make_engine()
    eos_seq = make_seq(prompt, greedy(6), eos=frozenset({ref[2]}))
    stop_seq = make_seq(prompt, SamplingOptions(temperature=0.0, max_tokens=6, stop_token_ids=frozenset({ref[1]})))
    run_all(engine, [eos_seq, stop_seq])
    assert eos_seq.output_ids == ref[: ref.index(ref[2]) + 1] and eos_seq.finish_reason is FinishReason.STOP
    assert stop_seq.output_ids == ref[: ref.index(ref[1]) + 1] and stop_seq.finish_reason is FinishReason.STOP


def test_logprobs_only_for_rows_that_asked() -> None:
    engine, _ = make_engine()
    want = make_seq([1, 2], SamplingOptions(temperature=0.0, max_tokens=2, logprobs=True, top_logprobs=3))
    plain = make_seq([3, 4], greedy(2))
    one_top = make_seq([5], SamplingOptions(temperature=0.0, max_tokens=2, top_logprobs=1))
    events = run_all(engine, [want, plain, one_top])
    for ev in events[want.seq_id]:
        assert ev.logprob is not None and len(ev.top_ids) == 3 and len(ev.top_logprobs) == 3
        assert ev.top_ids[0] == ev.token_id and ev.top_logprobs[0] == pytest.approx(ev.logprob)
    for ev in events[plain.seq_id]:
        assert ev.logprob is None and ev.top_ids is None and ev.top_logprobs is None
    for ev in events[one_top.seq_id]:
        assert ev.logprob is None and len(ev.top_ids) == 1


def test_step_stats_describe_the_step() -> None:
    engine, _ = make_engine(max_num_seqs=2, num_blocks=10, block_size=4)
    assert engine.step() == ([], None)
    for p in ([1, 2, 3], [4, 5], [6]):
        engine.add(make_seq(p, greedy(5)))
    events, stats = engine.step()
    assert isinstance(stats, StepStats) and len(events) == 2
    assert (stats.num_rows, stats.num_tokens, stats.num_preempted, stats.num_waiting, stats.num_running) == \
        (2, 5, 0, 1, 2)
    assert stats.kv_usage_ratio == pytest.approx(0.2) and stats.seconds >= 0


def test_abort_ends_a_sequence_and_frees_everything() -> None:
    engine, runner = make_engine()
    seq = make_seq([1, 2, 3], SamplingOptions(temperature=1.0, seed=3, max_tokens=50))
    waiting = make_seq([4], greedy(5))
    engine.add(seq)
    engine.step()
    engine.add(waiting)
    assert engine.abort(seq.seq_id) is seq
    assert seq.finish_reason is FinishReason.CANCELLED and seq.block_table == []
    assert runner.released == [seq.seq_id]
    assert seq.seq_id not in engine._generators._gens
    assert engine.abort(seq.seq_id) is None
    assert engine.abort(waiting.seq_id) is waiting and waiting.finish_reason is FinishReason.CANCELLED
    assert not engine.has_work and engine.scheduler.blocks.num_free_blocks == 64
    assert engine.abort(12345) is None


def test_finished_sequences_are_released_once_and_cannot_be_aborted() -> None:
    engine, runner = make_engine()
    seq = make_seq([1], SamplingOptions(temperature=1.0, seed=1, max_tokens=2))
    run_all(engine, [seq])
    assert runner.released == [seq.seq_id] and engine._generators._gens == {}
    assert engine.abort(seq.seq_id) is None


def test_step_metrics_follow_the_scheduler() -> None:
    engine, _ = make_engine(max_num_seqs=1, num_blocks=10)
    metrics = Metrics("thinker", "r0")
    record = bind_engine_metrics(metrics, TokenCore(engine))
    labels = {"stage": "thinker", "replica": "r0", "model_name": ""}

    def value(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    engine.add(make_seq([1, 2, 3, 4, 5], greedy(3)))
    engine.add(make_seq([1], greedy(3)))
    assert value("omnimesh_queue_depth") == 2
    _, stats = engine.step()
    record(stats)
    assert value("omnimesh_queue_depth") == 1 and value("omnimesh_requests_running") == 1
    assert value("omnimesh_kv_usage_ratio") == pytest.approx(0.2)
    assert value("omnimesh_state_slot_usage_ratio") == 0  # an attention-only model holds no state slots
    assert value("omnimesh_batch_size_count") == 1 and value("omnimesh_batch_size_sum") == 1
    assert value("omnimesh_batch_tokens_sum") == 5 and value("omnimesh_step_time_seconds_count") == 1
    assert value("omnimesh_prefix_cache_queries_total") == 5 and value("omnimesh_prefix_cache_hits_total") == 0


def test_step_stats_count_prefix_queries_and_hits() -> None:
    engine, _ = make_engine(block_size=4)
    prompt = list(range(60, 70))
    run_all(engine, [make_seq(prompt, greedy(1))])

    def next_stats() -> StepStats:  # a step launched ahead for rows that had ended reports nothing
        for _ in range(3):
            if (stats := engine.step()[1]) is not None:
                return stats
        raise AssertionError("no step reported in 3")

    engine.add(make_seq(prompt, greedy(1)))
    stats = next_stats()
    assert (stats.prefix_queried_tokens, stats.prefix_hit_tokens) == (10, 8)
    opted_out = make_seq(prompt, greedy(1))
    opted_out.allow_prefix_cache = False
    engine.add(opted_out)
    stats = next_stats()
    assert (stats.prefix_queried_tokens, stats.prefix_hit_tokens) == (0, 0)  # opted out: not a query


def test_a_step_launched_ahead_for_rows_that_had_ended_is_read_but_not_reported() -> None:
    engine, _ = make_engine()
    run_all(engine, [make_seq([1, 2, 3], greedy(3))])
    assert engine._in_flight is not None and not engine.has_work  # launched ahead; the sequence ended before it
    time.sleep(0.5)  # the engine idles with it until the next request
    engine.add(make_seq([4, 5], greedy(2)))
    assert engine.step() == ([], None)  # read and dropped: its 500 ms "duration" would be idle time
    events, stats = engine.step()
    assert [e.seq.prompt_ids for e in events] == [[4, 5]] and stats is not None and stats.seconds < 0.5


class DeviceClock:
    """The engine's clock, advanced only by TimedRunner."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class TimedRunner(FakeRunner):
    """Each step takes `step_s` of the clock at launch, as a device step takes between two reads."""

    def __init__(self, blocks: BlockManager, run_ahead: bool, clock: DeviceClock, step_s: float) -> None:
        super().__init__(blocks, VOCAB, run_ahead=run_ahead)
        self.clock, self.step_s = clock, step_s

    def run(self, batch: ScheduledBatch, pending: PendingTokens | None = None) -> torch.Tensor:
        self.clock.now += self.step_s
        return super().run(batch, pending)


@pytest.mark.parametrize("run_ahead", [True, False])
def test_a_step_is_timed_once_when_the_next_runs_ahead_of_it(run_ahead: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Launched ahead, a step's span from its launch to its read covers the step before it too: reported, it is the
    time since that one's read (one step), as without run-ahead."""
    clock = DeviceClock()
    monkeypatch.setattr(engine_module, "time", clock)
    blocks = BlockManager(num_blocks=64, block_size=4, enable_prefix_cache=False)
    engine = Engine(Scheduler(SchedulerLimits(4, 64, 256), blocks), TimedRunner(blocks, run_ahead, clock, 0.03))
    engine.add(make_seq(5, greedy(10)))
    seconds = []
    while engine.has_work:
        _, stats = engine.step()
        if stats is not None:
            seconds.append(stats.seconds)
    # the first step run ahead is read after the second's launch: 60 ms from its own, the one step reported twice
    assert seconds == pytest.approx([0.06 if run_ahead else 0.03] + [0.03] * (len(seconds) - 1)), seconds


@pytest.mark.parametrize("seed", range(40))
def test_random_schedules_give_every_request_its_own_tokens_and_free_everything(seed: int) -> None:
    """Requests arrive between steps and some are aborted midway; prompts share prefixes (cache hits on blocks a
    running or a finished request wrote) and the blocks are too few (preemption); seeded sampling and greedy mixed.
    Each request that was not aborted gets the tokens it gets alone, an aborted one a prefix of them, and at the end
    no block is held and nothing is left to run."""
    rng = random.Random(seed)
    common = [rng.randrange(1, VOCAB) for _ in range(rng.randrange(4, 13))]
    prompts = [(common if rng.random() < 0.6 else []) + [rng.randrange(1, VOCAB) for _ in range(rng.randrange(1, 9))]
               for _ in range(rng.randrange(4, 10))]
    opts = [SamplingOptions(temperature=1.0, seed=seed * 100 + i, max_tokens=rng.randrange(1, 9)) if rng.random() < 0.5
            else greedy(rng.randrange(1, 9)) for i in range(len(prompts))]
    engine, _ = make_engine(max_num_seqs=rng.randrange(1, 5), max_batch_tokens=rng.randrange(4, 17),
                            num_blocks=rng.randrange(8, 14), block_size=4, prefix_cache=rng.random() < 0.7)
    seqs = [make_seq(p, o) for p, o in zip(prompts, opts)]
    pending, aborted, steps = list(seqs), set(), 0
    while pending or engine.has_work:
        steps += 1
        assert steps < 1_000, "the schedule did not finish"
        if pending and (not engine.has_work or rng.random() < 0.5):
            engine.add(pending.pop(0))
        added = [s for s in seqs if s not in pending and not s.is_finished]
        if added and rng.random() < 0.08:
            victim = rng.choice(added)
            engine.abort(victim.seq_id)
            aborted.add(victim.seq_id)
        engine.step()
    for p, s, o in zip(prompts, seqs, opts):
        expected = alone(p, o)
        assert s.output_ids == (expected[:len(s.output_ids)] if s.seq_id in aborted else expected), (p, o)
    blocks = engine.scheduler.blocks
    assert blocks.usage_ratio == 0.0 and not engine.scheduler.running and not engine.scheduler.waiting


class AsyncDevice:
    """A device that runs launched steps one after another, `step_s` each, while the host goes on (the engine's
    clock): a launch costs the host `launch_s`; reading a step's tokens waits for that step's end."""

    def __init__(self, step_s: float, launch_s: float) -> None:
        self.now = 0.0
        self.step_s, self.launch_s = step_s, launch_s
        self.free_at = 0.0  # when the last launched step ends
        self.launches: list[tuple[float, float, float]] = []  # (host time of the launch, device start, end)

    def perf_counter(self) -> float:
        return self.now

    def launch(self) -> float:
        began = self.now
        self.now += self.launch_s
        start = max(self.now, self.free_at)
        self.free_at = start + self.step_s
        self.launches.append((began, start, self.free_at))
        return self.free_at


def async_engine(monkeypatch: pytest.MonkeyPatch, device: AsyncDevice, late_launch: bool) -> tuple[Engine, FakeRunner]:
    monkeypatch.setattr(engine_module, "time", device)
    sample = engine_module.launch_sample

    class Draws:
        def __init__(self, pending, end: float) -> None:  # noqa: ANN001
            self.tokens, self._pending, self._end = pending.tokens, pending, end

        def result(self):  # noqa: ANN202
            device.now = max(device.now, self._end)
            return self._pending.result()

    monkeypatch.setattr(engine_module, "launch_sample", lambda *a, **k: Draws(sample(*a, **k), device.launch()))
    blocks = BlockManager(num_blocks=64, block_size=4, enable_prefix_cache=False)
    runner = FakeRunner(blocks, VOCAB, run_ahead=True)
    return Engine(Scheduler(SchedulerLimits(4, 64, 256), blocks), runner, late_launch=late_launch), runner


def drive(engine: Engine, device: AsyncDevice, arrivals: list[tuple[float, Sequence]],
          first_token_at: dict[int, float]) -> None:
    """EngineLoop's rounds on the device's clock: requests arrive at their times (added between steps, and during
    a deferred step's wait), `step_due_in` is waited out, then a step; until nothing is left."""
    def arrive() -> None:
        while arrivals and arrivals[0][0] <= device.now:
            engine.add(arrivals.pop(0)[1])

    for _ in range(200):
        arrive()
        if not engine.has_work:
            if not arrivals:
                return
            device.now = arrivals[0][0]
            continue
        if (due := engine.step_due_in()) > 0:
            device.now += due
            arrive()
        for ev in engine.step()[0]:
            first_token_at.setdefault(ev.seq.seq_id, device.now)
    raise AssertionError("the engine did not finish")


@pytest.mark.parametrize("late_launch", [False, True])
def test_late_launch_queues_the_next_step_just_before_the_running_one_ends(
        late_launch: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    device = AsyncDevice(step_s=0.020, launch_s=0.001)
    engine, _ = async_engine(monkeypatch, device, late_launch)
    drive(engine, device, [(0.0, make_seq(5, greedy(12)))], {})
    decodes = device.launches[3:]  # from the third step on the engine has a decode step's duration
    for (_, _, end), (launched, start, _) in zip(decodes, decodes[1:]):
        assert start == pytest.approx(end)  # the device never waits for the host
        if late_launch:  # launched its launch time and the slack (15% of 20 ms) before the running step's end
            assert launched == pytest.approx(end - 0.001 - 0.003)
        else:
            assert launched < end - 0.015  # at once, a whole step ahead
    assert engine.scheduler.blocks.num_free_blocks == 64


def test_a_request_arriving_during_a_step_joins_the_next_one_with_late_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At once, the next step is already queued when the request comes: it waits that one out, then its own."""
    ttft = {}
    for late_launch in (False, True):
        device = AsyncDevice(step_s=0.020, launch_s=0.001)
        engine, _ = async_engine(monkeypatch, device, late_launch)
        talker, late = make_seq(5, greedy(30)), make_seq(3, greedy(2))
        first: dict[int, float] = {}
        drive(engine, device, [(0.0, talker), (0.205, late)], first)  # mid-step: steps end every 20 ms
        ttft[late_launch] = first[late.seq_id] - 0.205
        assert late.output_ids == alone([1, 2, 3], greedy(2))
    assert ttft[True] == pytest.approx(ttft[False] - 0.020)  # one step sooner


def test_late_launch_follows_prefill_steps_and_steps_without_an_estimate_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    device = AsyncDevice(step_s=0.020, launch_s=0.001)
    engine, _ = async_engine(monkeypatch, device, late_launch=True)
    engine.add(make_seq(5, greedy(8)))
    engine.step()  # the prefill launched; the first decode launched ahead of its read
    assert engine.step_due_in() == 0.0  # no decode step of one row timed yet
    while engine.step_due_in() == 0.0:
        engine.step()
    engine.add(make_seq(40, greedy(2)))  # a prefill joins the next step: that one is followed at once
    engine.step()
    assert engine._in_flight is not None and engine._in_flight.batch.num_tokens > 2
    assert engine.step_due_in() == 0.0


def test_late_launch_waits_for_nothing_on_a_runner_that_does_not_run_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    device = AsyncDevice(step_s=0.020, launch_s=0.001)
    monkeypatch.setattr(engine_module, "time", device)
    blocks = BlockManager(num_blocks=64, block_size=4, enable_prefix_cache=False)
    engine = Engine(Scheduler(SchedulerLimits(4, 64, 256), blocks), FakeRunner(blocks, VOCAB, run_ahead=False),
                    late_launch=True)
    engine.add(make_seq(5, greedy(6)))
    while engine.has_work:
        assert engine.step_due_in() == 0.0
        engine.step()
