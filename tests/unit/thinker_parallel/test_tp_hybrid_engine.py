"""Qwen3.5 TP2 (gloo, one spawned worker) under the thinker's engine gives the single-rank engine's greedy tokens:
chunked prefills beside decode rows with fewer state slots than sequences (slots reused, so each rank zeroes its
share of a slot as a sequence starts in it); and prefix-cache hits, which resume every rank from its share of a
state snapshot, equal an engine without the cache. The kernel path's decode graphs: test_tp_hybrid_graphs.py."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.parallel.launch import load_parallel_thinker
from services.thinker.parallel.runner import ParallelRunner
from services.thinker.parallel.sharded_hybrid import ShardedHybridLM
from tests.parity.qwen3_5.test_hybrid_engine import PROMPTS, run_engine
from tests.parity.qwen3_5.test_hybrid_prefix_cache import QUESTIONS, SYSTEM, generate, make_engine


def tp2_hybrid(ckpt: Path, use_kernels: bool) -> Iterator[ShardedHybridLM]:
    """A TP2 group for a fixture (one per process at a time: torch.distributed's default group)."""
    model = load_parallel_thinker(ckpt, 2, torch.device("cpu"), torch.float32, cpu_threads=1, timeout_s=60,
                                  use_kernels=use_kernels)
    try:
        yield model
    finally:
        model.driver.close()


@pytest.fixture(scope="module")
def tp2(qwen3_5_ckpt: Path) -> Iterator[ShardedHybridLM]:
    """The reference path; each engine built on it has the worker allocate its caches anew."""
    yield from tp2_hybrid(qwen3_5_ckpt, use_kernels=False)


@pytest.fixture(scope="module")
def single(qwen3_5_ckpt: Path) -> HybridLM:
    return HybridLM.load(qwen3_5_ckpt, use_kernels=False)


def test_tp2_engine_greedy_tokens_equal_single_rank(tp2: ShardedHybridLM, single: HybridLM) -> None:
    engine = {"max_batch_tokens": 32, "num_state_slots": 2}  # 150-token prompt in chunks; 4 sequences, 2 slots
    got = run_engine(tp2, list(PROMPTS), **engine)
    assert got.tokens == run_engine(single, list(PROMPTS), **engine).tokens
    assert got.max_rows == 2 and all(got.tokens)


def test_tp2_prefix_cache_hits_equal_misses(tp2: ShardedHybridLM, single: HybridLM) -> None:
    cached, plain = make_engine(tp2, 4), make_engine(single, 0)
    assert isinstance(cached.engine.runner, ParallelRunner)
    turn1 = SYSTEM + QUESTIONS[0]
    first = generate(cached, 0, turn1)
    assert first == generate(plain, 0, turn1) and cached.scheduler.num_prefix_hit_tokens == 0
    other = SYSTEM + QUESTIONS[1]  # resumes from the system turn's snapshot
    assert generate(cached, 1, other) == generate(plain, 1, other)
    assert cached.scheduler.num_prefix_hit_tokens == 32
    turn2 = turn1 + first + [151645, 198] + QUESTIONS[1]  # the chat's next turn: resumes after turn 1's prompt
    assert generate(cached, 2, turn2) == generate(plain, 2, turn2)
    assert cached.scheduler.num_prefix_hit_tokens - 32 >= len(turn1) - 16
