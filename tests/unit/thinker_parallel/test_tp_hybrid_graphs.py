"""Qwen3.5 TP2 on the kernel path under the engine (CPU, gloo): decode steps go through the decode graphs' static
buffers (run eagerly off CUDA; their slot buffer broadcast into the worker's, padding rows on each rank's scratch
slot), prefill steps eagerly, and the greedy tokens equal the single-rank engine's. Captured graphs with NCCL inside
need two GPUs: test_tp_hybrid_gpu.py."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.parallel.sharded_hybrid import ShardedHybridLM
from tests.parity.qwen3_5.test_hybrid_engine import PROMPTS, run_engine
from tests.unit.thinker_parallel.test_tp_hybrid_engine import tp2_hybrid


@pytest.fixture(scope="module")
def tp2(qwen3_5_ckpt: Path) -> Iterator[ShardedHybridLM]:
    yield from tp2_hybrid(qwen3_5_ckpt, use_kernels=True)


def test_tp2_decode_graph_buffers_equal_single_rank(qwen3_5_ckpt: Path, tp2: ShardedHybridLM) -> None:
    engine = {"max_batch_tokens": 32, "cuda_graphs": True, "decode_batch_buckets": [1, 2, 4],
              "prefill_token_buckets": [32], "num_state_snapshots": 0}  # no cut chunks: 3-row decode steps occur
    run = run_engine(tp2, list(PROMPTS), **engine)
    single = HybridLM.load(qwen3_5_ckpt, use_kernels=False)
    assert run.tokens == run_engine(single, list(PROMPTS), max_batch_tokens=32).tokens
    assert run.replays.get("decode:4", 0) > 0 and not any(k.startswith("prefill") for k in run.replays)
