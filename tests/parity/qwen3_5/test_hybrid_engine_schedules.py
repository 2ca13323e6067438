"""Qwen3.5's engine under random schedules: requests arrive between steps, some are aborted midway, prompts share a
system turn (prefix cache hits that restore state snapshots), and too few KV blocks, state slots and snapshots
force preemption, queueing and snapshot eviction. Every request that was not aborted gets the greedy tokens it gets
alone, and at the end no state slot, KV block reference or snapshot name is left to a finished request."""
from __future__ import annotations

import random

import pytest
import torch

from bench.thinker.engine_loop import text_request
from runtime.config import EngineConfig
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sequence import Sequence
from services.thinker.build import build_engine
from services.thinker.model.hybrid_lm import HybridLM

CPU = torch.device("cpu")
IM_START, IM_END, NEWLINE = 151644, 151645, 198
TURN_END = frozenset({IM_END})
NEW_TOKENS = 5
# a 37-token system turn (past two 16-token blocks), then 8 questions of 3 to 40 tokens, some asked twice
SYSTEM = [IM_START, 8948, NEWLINE, *((13 * i + 7) % 4000 + 300 for i in range(32)), IM_END, NEWLINE]


def question(k: int) -> list[int]:
    body = [(29 * k + 11 * i) % 4000 + 300 for i in range(3 + 5 * k)]
    return [IM_START, 872, NEWLINE, *body, IM_END, NEWLINE, IM_START, 77091, NEWLINE]


PROMPTS = [SYSTEM + question(k) for k in range(8)] + [question(2), SYSTEM + question(3)]


def engine_for(model: HybridLM, **overrides):
    eng = EngineConfig(**{"max_num_seqs": 4, "max_batch_tokens": 32, "block_size": 16, "num_kv_blocks": 64,
                          "enable_prefix_cache": True, **overrides})
    return build_engine(model, eng, CPU, torch.float32, turn_end_tokens=TURN_END)


def greedy() -> SamplingOptions:
    return SamplingOptions(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def dense_lm(qwen3_5_ckpt) -> HybridLM:
    return HybridLM.load(qwen3_5_ckpt, use_kernels=False)


@pytest.fixture(scope="module")
def each_alone(dense_lm: HybridLM) -> list[list[int]]:
    """Each prompt on an engine of its own with no prefix cache: no snapshot, no other row, no preemption."""
    out = []
    for i, prompt in enumerate(PROMPTS):
        parts = engine_for(dense_lm, enable_prefix_cache=False)
        parts.engine.add(Sequence(i, f"alone-{i}", prompt, greedy(), frozenset(), text_request(prompt, dense_lm.cfg)))
        tokens = []
        while parts.engine.has_work:
            tokens += [e.token_id for e in parts.engine.step()[0] if e.token_id is not None]
        out.append(tokens)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_arrivals_and_aborts_under_pressure_give_each_prompt_its_own_tokens(
        dense_lm: HybridLM, each_alone: list[list[int]], seed: int) -> None:
    rng = random.Random(seed)
    # 10 blocks of 16 tokens for up to 4 rows of up to ~90 tokens: preemption; 3 slots for 4 rows; 2 snapshots
    parts = engine_for(dense_lm, num_kv_blocks=10, num_state_slots=3, num_state_snapshots=2)
    engine, scheduler = parts.engine, parts.scheduler
    order = rng.sample(range(len(PROMPTS)), len(PROMPTS))
    doomed = set(rng.sample(order, 3))  # aborted after a random number of steps once added
    abort_at: dict[int, int] = {}
    tokens: dict[int, list[int]] = {i: [] for i in order}
    preempted = hits = steps = 0
    while order or engine.has_work:
        steps += 1
        assert steps < 2_000, "the schedule did not finish"
        if order and (not engine.has_work or rng.random() < 0.4):
            i = order.pop()
            engine.add(Sequence(i, f"req-{i}", PROMPTS[i], greedy(), frozenset(),
                                text_request(PROMPTS[i], dense_lm.cfg)))
            if i in doomed:
                abort_at[i] = steps + rng.randrange(1, 8)
        for i in [i for i, at in abort_at.items() if at == steps]:
            engine.abort(i)
        events, stats = engine.step()
        for e in events:
            if e.token_id is not None:
                tokens[e.seq.seq_id].append(e.token_id)
        if stats is not None:
            preempted += stats.num_preempted
            hits += stats.prefix_hit_tokens
    for i, alone in enumerate(each_alone):
        if i in doomed:
            assert tokens[i] == alone[:len(tokens[i])], f"prompt {i} before its abort"
        else:
            assert tokens[i] == alone, f"prompt {i}"
    assert hits > 0  # the shared system turn was restored from a snapshot at least once
    assert preempted > 0  # some request was preempted and recomputed into a fresh slot
    assert scheduler.slots.num_free == 3 and not scheduler.running and not scheduler.waiting
    assert scheduler.blocks.usage_ratio == 0.0  # cached blocks stay for reuse, none is held by a request
