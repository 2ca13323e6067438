"""Qwen3.5's LM (dense and MoE) against transformers on its demo checkpoints, fp32 on CPU: prefill logits, then the
logits of each paged decode step (recurrent state in a slot, KV in shuffled blocks) and the greedy tokens."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.thinker.model import ThinkerConfig
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.loader import load_thinker_lm
from tests.parity.qwen3_5.hybrid_harness import PROMPTS, HybridRunner, Reference

TOL = dict(rtol=1e-4, atol=1e-4)
STEPS = 4


def test_loader_picks_the_hybrid_lm_and_skips_mtp(hybrid_ckpt, hybrid_lm: HybridLM) -> None:
    assert isinstance(load_thinker_lm(hybrid_ckpt, use_kernels=False), HybridLM)
    assert ThinkerConfig.from_checkpoint(hybrid_ckpt) == hybrid_lm.cfg
    assert not any(name.startswith("mtp") for name in hybrid_lm.state_dict())


def test_prefill_and_decode_logits_match_transformers(hybrid_lm: HybridLM, references: list[Reference]) -> None:
    runs = references
    runner = HybridRunner(hybrid_lm, seed=3)
    results = runner.step([(seq, p) for seq, p in enumerate(PROMPTS)])  # three prefills in one packed step
    ours = [[int(r[-1].argmax())] for r in results]
    for run, logits in zip(runs, results):
        torch.testing.assert_close(logits, run.prefill_logits, **TOL)
    for step in range(1, STEPS):
        results = runner.step([(seq, [tokens[-1]]) for seq, tokens in enumerate(ours)])  # batched decode rows
        for seq, logits in enumerate(results):
            torch.testing.assert_close(logits[0], runs[seq].step_logits[step], **TOL)
            ours[seq].append(int(logits[0].argmax()))
    assert ours == [run.tokens[:STEPS] for run in runs]


def test_forward_without_state_slots_is_refused(hybrid_lm: HybridLM) -> None:
    runner = HybridRunner(hybrid_lm)
    with pytest.raises(ValueError, match="StateContext"):
        hybrid_lm(torch.zeros(1, hybrid_lm.cfg.hidden_size), torch.zeros(3, 1, dtype=torch.long), None,
                  runner.kv_caches)


def test_kernel_path_on_cpu_matches_reference_path(hybrid_ckpt, hybrid_lm: HybridLM) -> None:
    """The GPU path's structure (kernel attention backend, fused MoE with the shared expert folded in), its kernels
    falling back to their references off CUDA."""
    fused = HybridLM.load(hybrid_ckpt, dtype=torch.float32, use_kernels=True)
    assert fused.use_kernels
    want, got = HybridRunner(hybrid_lm, seed=4), HybridRunner(fused, seed=4)
    feeds = [(seq, list(p)) for seq, p in enumerate(PROMPTS)]
    for _ in range(3):
        expected, actual = want.step(feeds), got.step(feeds)
        for e, a in zip(expected, actual):
            torch.testing.assert_close(a, e, **TOL)
        feeds = [(seq, [int(e[-1].argmax())]) for seq, e in enumerate(expected)]
    for layer in fused.layers:  # each fused gate/up GEMM reads the layer's own weights, not a second copy
        mlp = getattr(layer.mlp, "shared_expert", layer.mlp)
        gate_up = layer.mlp._fused_shared.gate_up_proj if mlp is not layer.mlp else mlp.gate_up_weight
        assert gate_up.data_ptr() == mlp.gate_proj.weight.data_ptr()


@pytest.mark.parametrize("moe", [False, True])
def test_kernel_path_on_cpu_equals_plain_path(qwen3_5_ckpt: Path, qwen3_5_moe_ckpt: Path, moe: bool) -> None:
    """The kernel path's wiring (residual carried apart into fused zero-centred norms, the router's logits from the
    norm, the fused MoE, one GEMM for the DeltaNet input projections, the gates) through its CPU references: the
    plain path's numbers step after step, up to fp32 summation order (the fused GEMM adds in another order)."""
    ckpt = qwen3_5_moe_ckpt if moe else qwen3_5_ckpt
    plain = HybridRunner(HybridLM.load(ckpt, use_kernels=False), seed=1)
    model = HybridLM.load(ckpt, use_kernels=True)
    assert model.use_kernels
    kernels = HybridRunner(model, seed=1)
    feeds = [(i, p) for i, p in enumerate(PROMPTS)]
    for _ in range(3):
        want, got = plain.step(feeds), kernels.step(feeds)
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        feeds = [(i, [int(w[-1].argmax())]) for i, w in enumerate(want)]
