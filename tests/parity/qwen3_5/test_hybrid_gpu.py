"""Qwen3.5's GPU path against the plain-PyTorch reference: fla-core's chunked and fused-recurrent gated delta rule
over state slots, and the whole LM in bf16 on the kernels against fp32 on CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.thinker.engine_loop import text_request
from runtime.config import EngineConfig
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sequence import Sequence
from runtime.kernels import gated_delta
from services.thinker.build import build_engine
from services.thinker.model.hybrid_lm import HybridLM
from tests.parity.qwen3_5.hybrid_harness import HybridRunner
from tests.parity.qwen3_5.test_hybrid_engine import PROMPTS

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
                assert _relative_error(a, e) < 5e-2  # bf16 through 8 layers; a routing flip stays local
            feeds = [(seq, [int(e[-1].argmax())]) for seq, e in enumerate(expected)]


@pytest.mark.gpu
def test_captured_decode_graphs_equal_eager_steps(qwen3_5_ckpt: Path) -> None:
    model = HybridLM.load(qwen3_5_ckpt, device="cuda", dtype=torch.bfloat16)
    results = []
    for graphs in (False, True):
        eng = EngineConfig(max_num_seqs=4, max_batch_tokens=64, num_kv_blocks=64, enable_prefix_cache=False,
                           cuda_graphs=graphs, decode_batch_buckets=[1, 2, 4])
        parts = build_engine(model, eng, torch.device("cuda"), torch.bfloat16)
        sampling = SamplingOptions(temperature=0.0, max_tokens=8, ignore_eos=True)
        for i, prompt in enumerate(PROMPTS):
            parts.engine.add(Sequence(i, f"r{i}", prompt, sampling, frozenset(), text_request(prompt, model.cfg)))
        tokens: dict[int, list[int]] = {i: [] for i in range(len(PROMPTS))}
        while parts.engine.has_work:
            for event in parts.engine.step()[0]:
                if event.token_id is not None:
                    tokens[event.seq.seq_id].append(event.token_id)
        results.append(tokens)
        if graphs:
            assert parts.engine.runner.graphs.replays.get("decode:4", 0) > 0
    assert results[0] == results[1]
