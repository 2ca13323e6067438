"""GPU: Qwen3.5's kernels in Triton against their references in bf16: the zero-centred fused add + norm (alone and
with the router), and the Gated DeltaNet's output norm, gates and width-4 causal conv decode step over state slots,
on views of one fused projection output as the layer passes them."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels import causal_conv
from runtime.kernels.causal_conv import (
    causal_conv_decode, causal_conv_decode_reference, causal_conv_prefill_rows, conv_prefill_plan,
)
from runtime.kernels.deltanet_gates import deltanet_gates, deltanet_gates_reference
from runtime.kernels.gated_rmsnorm import gated_rmsnorm, gated_rmsnorm_reference
from runtime.kernels.rmsnorm import fused_add_rmsnorm, fused_add_rmsnorm_router
from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference, add_rmsnorm_router_reference
from tests.unit.kernels.kernel_data import needs_cuda, rel_err

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]
BF16 = torch.bfloat16


@pytest.mark.parametrize("tokens", [1, 32, 333])
def test_zero_centred_add_norm_matches_reference(tokens: int) -> None:
    pytest.importorskip("triton")
    x, res = (torch.randn(tokens, 4096, device="cuda").to(BF16) for _ in range(2))
    weight = (0.1 * torch.randn(4096, device="cuda")).to(BF16)  # stored around 0: the scale is 1 + w
    got = fused_add_rmsnorm(x, res, weight, zero_centred=True)
    ref = add_rmsnorm_reference(x, res, weight, zero_centred=True)
    assert torch.equal(got.residual, ref.residual) and rel_err(got.normed, ref.normed) < 4e-3
    router = torch.randn(256, 4096, device="cuda").to(BF16) / 64
    got = fused_add_rmsnorm_router(x, res, weight, router, zero_centred=True)
    ref = add_rmsnorm_router_reference(x, res, weight, router, zero_centred=True)
    assert rel_err(got.normed, ref.normed) < 4e-3 and rel_err(got.logits, ref.logits) < 1e-2


def _projection(tokens: int) -> torch.Tensor:
    """[T, conv 8192 | z 4096 | b 32 | a 32]: the 9B's fused DeltaNet input projection output."""
    return torch.randn(tokens, 8192 + 4096 + 64, device="cuda").to(BF16)


@pytest.mark.parametrize("tokens", [1, 7, 64])
def test_gated_rmsnorm_matches_reference(tokens: int) -> None:
    pytest.importorskip("triton")
    x = torch.randn(tokens, 32, 128, device="cuda").to(BF16)
    z = _projection(tokens)[:, 8192:8192 + 4096].view(tokens, 32, 128)
    weight = (1 + 0.1 * torch.randn(128, device="cuda")).to(BF16)
    assert rel_err(gated_rmsnorm(x, z, weight, 1e-6), gated_rmsnorm_reference(x, z, weight, 1e-6)) < 4e-3
    assert rel_err(gated_rmsnorm(x, z.contiguous(), weight, 1e-6), gated_rmsnorm_reference(x, z, weight, 1e-6)) < 4e-3


@pytest.mark.parametrize("tokens", [1, 33])
def test_deltanet_gates_match_reference(tokens: int) -> None:
    pytest.importorskip("triton")
    proj = _projection(tokens)
    b, a = proj[:, -64:-32], proj[:, -32:] * 10  # a reaching past softplus' linear threshold
    a_log, dt_bias = torch.randn(32, device="cuda").to(BF16), torch.randn(32, device="cuda").to(BF16)
    got, ref = deltanet_gates(a, b, a_log, dt_bias), deltanet_gates_reference(a, b, a_log, dt_bias)
    assert got.g.dtype == torch.float32 and rel_err(got.g, ref.g) < 1e-5
    assert got.beta.dtype == BF16 and rel_err(got.beta, ref.beta) < 4e-3


@pytest.mark.parametrize("rows", [1, 3, 32])
def test_causal_conv_decode_matches_reference(rows: int) -> None:
    pytest.importorskip("triton")
    slots = torch.randperm(40, device="cuda")[:rows]
    x = _projection(rows)[:, :8192]  # the conv input, a view of the fused projection
    weight = torch.randn(8192, 4, device="cuda").to(BF16) / 2
    states = torch.randn(40, 8192, 3, device="cuda").to(BF16)
    got_states, ref_states = states.clone(), states.clone()
    got = causal_conv_decode(x, weight, got_states, slots)
    ref = causal_conv_decode_reference(x, weight, ref_states, slots)
    assert rel_err(got, ref) < 1e-2
    assert torch.equal(got_states, ref_states)  # the shift moves values; nothing is rounded


@pytest.mark.parametrize("counts", [[8192], [3, 1, 300, 2, 77]])
def test_causal_conv_prefill_rows_matches_plain_torch(counts: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    slots = torch.randperm(40)[:len(counts)].tolist()
    x = _projection(sum(counts))[:, :8192]
    weight = torch.randn(8192, 4, device="cuda").to(BF16) / 2
    states = torch.randn(40, 8192, 3, device="cuda").to(BF16)
    plan = conv_prefill_plan(counts, slots, 4, torch.device("cuda"))
    got_states, ref_states = states.clone(), states.clone()
    got = causal_conv_prefill_rows(x, weight, got_states, plan)
    monkeypatch.setattr(causal_conv, "use_triton", lambda *t: False)
    ref = causal_conv_prefill_rows(x, weight, ref_states, plan)
    assert rel_err(got, ref) < 1e-2
    assert torch.equal(got_states, ref_states)
