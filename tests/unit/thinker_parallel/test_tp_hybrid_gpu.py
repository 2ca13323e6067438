"""Qwen3.5 TP2 on two GPUs (NCCL) under the engine, bf16 kernel path: captured decode graphs (the broadcast of
rank 0's static slot buffer and every all-reduce inside them), fla's delta rule on each rank's heads, eager prefill
steps compiled on both ranks at start, and prefix-cache hits, against the same engine on one GPU. Not run on CPU."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from bench.thinker.engine_loop import text_request
from runtime.config import EngineConfig
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sequence import Sequence
from services.thinker.build import build_engine
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.parallel.launch import load_parallel_thinker
from services.thinker.parallel.sharded_hybrid import ShardedHybridLM
from tests.parity.qwen3_5.test_hybrid_engine import PROMPTS
from tests.parity.qwen3_5.test_hybrid_prefix_cache import IM_END, SYSTEM

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")]
GPU = torch.device("cuda:0")
NEAR_TIE = 5e-2  # bf16 sums in another order move this random model's logits by a few percent
# every prompt twice behind one system turn: the second of each resumes from a state snapshot
REQUESTS = [SYSTEM + p for p in PROMPTS] * 2


@pytest.fixture(scope="module")
def tp2(qwen3_5_ckpt: Path) -> Iterator[ShardedHybridLM]:
    model = load_parallel_thinker(qwen3_5_ckpt, 2, GPU, torch.bfloat16, cpu_threads=0, timeout_s=120,
                                  use_kernels=True)
    try:
        yield model
    finally:
        model.driver.close()


def _run(model: HybridLM) -> tuple[dict[int, list], object]:
    eng = EngineConfig(max_num_seqs=4, max_batch_tokens=64, num_kv_blocks=128, enable_prefix_cache=True,
                       num_state_snapshots=8, cuda_graphs=True, decode_batch_buckets=[1, 2, 4])
    parts = build_engine(model, eng, GPU, torch.bfloat16, turn_end_tokens=frozenset({IM_END}))
    sampling = SamplingOptions(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=True, top_logprobs=2)
    events: dict[int, list] = {i: [] for i in range(len(REQUESTS))}
    for i, prompt in enumerate(REQUESTS):
        parts.engine.add(Sequence(i, f"r{i}", prompt, sampling, frozenset(), text_request(prompt, model.cfg)))
    while parts.engine.has_work:
        for event in parts.engine.step()[0]:
            if event.token_id is not None:
                events[event.seq.seq_id].append(event)
    return events, parts


def test_tp2_hybrid_captured_graphs_with_nccl_equal_one_gpu(qwen3_5_ckpt: Path, tp2: ShardedHybridLM) -> None:
    got, parts = _run(tp2)
    runner = parts.engine.runner
    assert runner.capture_records and runner.graphs.replays.get("decode:4", 0) > 0
    assert parts.scheduler.num_prefix_hit_tokens > 0
    want, _ = _run(HybridLM.load(qwen3_5_ckpt, device=GPU, dtype=torch.bfloat16, use_kernels=True))
    for i in range(len(REQUESTS)):
        assert len(got[i]) == len(want[i]) == 8
        for a, b in zip(got[i], want[i]):
            if a.token_id != b.token_id:  # only a near-tie may order differently; after it the texts differ
                assert abs(b.top_logprobs[0] - b.top_logprobs[1]) < NEAR_TIE, (i, a, b)
                break
            assert abs(a.logprob - b.logprob) < NEAR_TIE, (i, a.logprob, b.logprob)
