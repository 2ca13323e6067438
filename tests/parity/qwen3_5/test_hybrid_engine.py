"""Qwen3.5 through the thinker's engine (scheduler with state slots, runner, run-ahead steps) on CPU: greedy tokens
equal transformers' generate; many prefill chunks, concurrent rows, too few state slots and preemption by recompute
all give the tokens of one sequence run alone."""
from __future__ import annotations

import pytest
import torch

from bench.thinker.engine_loop import text_request
from runtime.config import EngineConfig
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sequence import Sequence
from services.thinker.build import build_engine
from services.thinker.model.hybrid_lm import HybridLM
from tests.parity.qwen3_5 import hybrid_harness
from tests.parity.qwen3_5.hybrid_harness import NEW_TOKENS, Reference

CPU = torch.device("cpu")
NEAR_TIE = 1e-4
# plus a long one: 10 chunks of 16 below, across two of the delta rule's 64-token chunks
PROMPTS = (*hybrid_harness.PROMPTS, [(11 * i + 5) % 3000 + 200 for i in range(150)])


class EngineRun:
    def __init__(self, tokens: list[list[int]], num_preempted: int, max_rows: int, replays: dict[str, int]) -> None:
        self.tokens, self.num_preempted, self.max_rows, self.replays = tokens, num_preempted, max_rows, replays


def run_engine(model: HybridLM, prompts: list[list[int]], **engine) -> EngineRun:
    eng = EngineConfig(**{"max_num_seqs": 4, "max_batch_tokens": 256, "block_size": 16, "num_kv_blocks": 64,
                          "enable_prefix_cache": True, **engine})
    parts = build_engine(model, eng, CPU, torch.float32)
    sampling = SamplingOptions(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        parts.engine.add(Sequence(i, f"req-{i}", prompt, sampling, frozenset(), text_request(prompt, model.cfg)))
    tokens: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    preempted = max_rows = 0
    while parts.engine.has_work:
        events, stats = parts.engine.step()
        for event in events:
            if event.token_id is not None:
                tokens[event.seq.seq_id].append(event.token_id)
        if stats is not None:
            preempted += stats.num_preempted
            max_rows = max(max_rows, stats.num_running)
    graphs = parts.engine.runner.graphs
    return EngineRun([tokens[i] for i in range(len(prompts))], preempted, max_rows,
                     dict(graphs.replays) if graphs is not None else {})


def test_engine_greedy_tokens_match_transformers_generate(hybrid_lm: HybridLM, references: list[Reference]) -> None:
    ours = run_engine(hybrid_lm, list(hybrid_harness.PROMPTS)).tokens
    for seq, (run, tokens) in enumerate(zip(references, ours)):
        for step, (mine, theirs) in enumerate(zip(tokens, run.tokens)):
            if mine != theirs:
                top2 = run.step_logits[step].topk(2).values
                gap = float(top2[0] - top2[1])
                assert gap < NEAR_TIE, f"prompt {seq} step {step}: ours {mine}, reference {theirs}, gap {gap:.2e}"
                break  # past a near-tie the continuations may part
        assert len(tokens) == NEW_TOKENS


@pytest.fixture(scope="module")
def dense_lm(qwen3_5_ckpt) -> HybridLM:
    return HybridLM.load(qwen3_5_ckpt, use_kernels=False)


@pytest.fixture(scope="module")
def each_alone(dense_lm: HybridLM) -> list[list[int]]:
    return [run_engine(dense_lm, [p]).tokens[0] for p in PROMPTS]


def test_many_prefill_chunks_equal_one(dense_lm: HybridLM, each_alone: list[list[int]]) -> None:
    chunked = run_engine(dense_lm, [PROMPTS[3]], max_batch_tokens=16)
    assert chunked.tokens == [each_alone[3]]


def test_concurrent_rows_in_mixed_steps_equal_each_alone(dense_lm: HybridLM, each_alone: list[list[int]]) -> None:
    together = run_engine(dense_lm, list(PROMPTS), max_batch_tokens=32)  # long prompts' chunks beside decode rows
    assert together.tokens == each_alone and together.max_rows == 4


def test_too_few_state_slots_queue_and_equal_each_alone(dense_lm: HybridLM, each_alone: list[list[int]]) -> None:
    two_slots = run_engine(dense_lm, list(PROMPTS), max_batch_tokens=32, num_state_slots=2)
    assert two_slots.tokens == each_alone and two_slots.max_rows == 2


def test_preempted_sequences_recompute_into_a_fresh_slot(dense_lm: HybridLM, each_alone: list[list[int]]) -> None:
    # 12 blocks of 16 tokens cannot hold the two long ones (5 + 10 blocks at the end): the later one is preempted
    tight = run_engine(dense_lm, list(PROMPTS), max_batch_tokens=32, num_kv_blocks=12)
    assert tight.num_preempted > 0 and tight.tokens == each_alone


def test_decode_graph_inputs_address_the_rows_slots(qwen3_5_ckpt, each_alone: list[list[int]]) -> None:
    """The kernel path's decode graphs (run eagerly over their static buffers off CUDA): each row's state slot read
    from the static slot buffer, padding rows on the scratch slot, prefill steps eager."""
    model = HybridLM.load(qwen3_5_ckpt, use_kernels=True)
    run = run_engine(model, list(PROMPTS), max_batch_tokens=32, cuda_graphs=True, decode_batch_buckets=[1, 2, 4],
                     prefill_token_buckets=[32], num_state_snapshots=0)  # no cut chunks: 3-row decode steps occur
    assert run.tokens == each_alone
    assert run.replays.get("decode:4", 0) > 0 and not any(k.startswith("prefill") for k in run.replays)
