"""Qwen3.5's GPU path against the plain-PyTorch reference: fla-core's chunked and fused-recurrent gated delta rule
over state slots, and the whole LM in bf16 on the kernels against fp32 on CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runtime.kernels import gated_delta
from services.thinker.model.hybrid_lm import HybridLM
from tests.parity.qwen3_5.hybrid_harness import HybridRunner

HK, HV, DK, DV, SLOTS = 2, 4, 64, 32, 6
ROWS = [(0, 70, 4), (70, 5, 1), (75, 130, 2)]  # (first token, tokens, slot): chunk tails, a short row, two chunks


def _inputs(num_tokens: int, device: str, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(num_tokens, HK, DK, generator=gen) for _ in range(2))
    v = torch.randn(num_tokens, HV, DV, generator=gen)
    g = -torch.rand(num_tokens, HV, generator=gen) * 0.5  # log decay, fp32 as the layer makes it
    beta = torch.rand(num_tokens, HV, generator=gen)
    states = torch.randn(SLOTS, HV, DK, DV, generator=gen) * 0.1
    cast = [t.to(device, dtype) for t in (q, k, v)]
    return (*cast, g.to(device), beta.to(device, dtype), states.to(device))


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float().cpu() - want.float().cpu()).norm() / want.float().norm())


@pytest.mark.gpu
def test_fla_prefill_over_slots_matches_reference() -> None:
    pytest.importorskip("fla")
    num_tokens = sum(n for _, n, _ in ROWS)
    q, k, v, g, beta, states = _inputs(num_tokens, "cuda", torch.bfloat16)
    assert gated_delta.use_fla(q)
    out = gated_delta.gated_delta_prefill(q, k, v, g, beta, states, ROWS)
    rq, rk, rv, rg, rbeta, rstates = _inputs(num_tokens, "cpu", torch.float32)
    want = gated_delta.gated_delta_prefill(rq, rk, rv, rg, rbeta, rstates, ROWS)
    assert _relative_error(out, want) < 2e-2
    assert _relative_error(states, rstates) < 2e-2
    untouched = [s for s in range(SLOTS) if s not in {slot for _, _, slot in ROWS}]
    torch.testing.assert_close(states[untouched].cpu(), _inputs(num_tokens, "cpu", torch.float32)[5][untouched])


@pytest.mark.gpu
def test_fla_decode_over_slots_matches_reference() -> None:
    pytest.importorskip("fla")
    slots = [3, 0, 5]
    q, k, v, g, beta, states = _inputs(len(slots), "cuda", torch.bfloat16, seed=1)
    out = gated_delta.gated_delta_decode(q, k, v, g, beta, states, torch.tensor(slots, device="cuda"))
    rq, rk, rv, rg, rbeta, rstates = _inputs(len(slots), "cpu", torch.float32, seed=1)
    want = gated_delta.gated_delta_decode(rq, rk, rv, rg, rbeta, rstates, torch.tensor(slots))
    assert _relative_error(out, want) < 2e-2
    assert _relative_error(states, rstates) < 2e-2


@pytest.mark.gpu
def test_bf16_kernel_path_matches_fp32_reference(qwen3_5_moe_ckpt: Path, qwen3_5_ckpt: Path) -> None:
    prompts = [[(7 * i + 3) % 5000 + 100 for i in range(90)], [151644, 872, 198, 9707, 151645]]
    for ckpt in (qwen3_5_ckpt, qwen3_5_moe_ckpt):
        want_model = HybridLM.load(ckpt, use_kernels=False)
        model = HybridLM.load(ckpt, device="cuda", dtype=torch.bfloat16)
        assert model.use_kernels
        want = HybridRunner(want_model, seed=2)
        got = HybridRunner(model, seed=2, device="cuda", dtype=torch.bfloat16)
        feeds = [(seq, p) for seq, p in enumerate(prompts)]
        for _ in range(4):
            expected, actual = want.step(feeds), got.step(feeds)
            for e, a in zip(expected, actual):
                assert _relative_error(a, e) < 3e-2
            feeds = [(seq, [int(e[-1].argmax())]) for seq, e in enumerate(expected)]
