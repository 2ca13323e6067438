"""TP2 over gloo (this process is rank 0, one spawned worker) against the single-rank HybridLM on the Qwen3.5 demo
checkpoints (dense, and MoE with the shared expert), fp32: a prompt prefilled in three chunks beside a second
sequence's prefill and decode rows, then decode steps of both, so each rank's conv and recurrent state carries
across chunks and steps in its own share of the slots; then one sequence's state copied into a free slot (a
prefix-cache snapshot) goes on exactly as its source."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.parallel.launch import load_parallel_thinker
from services.thinker.parallel.messages import Prepare
from services.thinker.parallel.sharded_hybrid import ShardedHybridLM
from tests.parity.qwen3_5.hybrid_harness import HybridRunner

NUM_SLOTS, NUM_BLOCKS, BLOCK = 4, 64, 4
PROMPT = [(7 * i + 3) % 5000 + 100 for i in range(29)]
# (sequence, token ids) per row of each step: sequence 0's prompt in chunks of 11, 11, 7, sequence 1's short prompt
# beside its second chunk, then decode rows of both in either order
STEPS = [[(0, PROMPT[:11])], [(0, PROMPT[11:22]), (1, [5, 6, 7, 8, 9])], [(1, [10]), (0, PROMPT[22:])],
         [(0, [11]), (1, [12])], [(1, [13]), (0, [14])], [(0, [15]), (1, [16])]]


@pytest.fixture(scope="module", params=["dense", "moe"])
def ckpt(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue("qwen3_5_moe_ckpt" if request.param == "moe" else "qwen3_5_ckpt")


@pytest.fixture(scope="module")
def tp2(ckpt: Path) -> Iterator[ShardedHybridLM]:
    model = load_parallel_thinker(ckpt, 2, torch.device("cpu"), torch.float32, cpu_threads=1, timeout_s=30,
                                  use_kernels=False)
    try:
        yield model
    finally:
        model.driver.close()


def _run(model: HybridLM) -> list[torch.Tensor]:
    """Every row's logits of STEPS, then of two more decode steps of sequence 0 and of a copy of it (sequence 2: its
    state copied into a slot of its own, sharing sequence 0's full KV blocks)."""
    runner = HybridRunner(model, NUM_SLOTS, NUM_BLOCKS, BLOCK)
    logits = [t for step in STEPS for t in runner.step(step)]
    assert runner.lens[0] % BLOCK == 0  # new tokens of either go to blocks of its own
    runner.states.copy([runner.slots[0]], [runner.slots[2]])
    runner.tables[2], runner.lens[2] = list(runner.tables[0]), runner.lens[0]
    for token in (17, 18):
        logits += runner.step([(0, [token]), (2, [token])])
    return logits


@torch.inference_mode()
def test_tp2_hybrid_logits_equal_single_rank(ckpt: Path, tp2: ShardedHybridLM) -> None:
    single = HybridLM.load(ckpt, use_kernels=False)
    cfg, hybrid = single.cfg, single.cfg.hybrid
    shard = tp2.cfg.hybrid
    assert (shard.num_key_heads, shard.num_value_heads) == (hybrid.num_key_heads // 2, hybrid.num_value_heads // 2)
    tp2.driver.send(Prepare(NUM_BLOCKS, BLOCK, None, NUM_SLOTS))
    expected, got = _run(single), _run(tp2)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)  # fp32, sums in another order
    assert [t.argmax(-1).tolist() for t in got] == [t.argmax(-1).tolist() for t in expected]
    # the copy went on as its source, on every rank (the MoE's expert batches may sum its row in another order)
    torch.testing.assert_close(got[-1], got[-2], rtol=1e-5, atol=1e-5)
    # rank 0 holds its heads' share of each layer and of each state slot, not a copy of the whole decoder
    linear = tp2.layers[hybrid.linear_layers[0]].linear_attn
    assert linear.in_proj_qkv.weight.shape[0] == hybrid.conv_dim // 2
    assert linear.A_log.shape[0] == hybrid.num_value_heads // 2
    attn = tp2.layers[hybrid.full_layers[0]].self_attn
    assert attn.q_proj.weight.shape[0] == cfg.num_heads * cfg.head_dim  # half the heads, each with its gate
    states = tp2.allocate_states(1, "cpu")
    assert states.recurrent.shape[2] == hybrid.num_value_heads // 2 and states.conv.shape[2] == hybrid.conv_dim // 2
    if cfg.num_experts:
        moe = tp2.layers[0].mlp
        assert moe.shared_expert.gate_proj.weight.shape[0] == cfg.shared_expert_intermediate_size // 2
        assert moe.shared_expert_gate.weight.shape == (1, cfg.hidden_size)
