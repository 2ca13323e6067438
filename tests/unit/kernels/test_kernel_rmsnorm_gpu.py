"""GPU: fused residual-add + RMSNorm and q/k norm + rotary in Triton against the reference, in bf16."""
from __future__ import annotations

import pytest
import torch

from tests.unit.kernels.kernel_data import needs_cuda, rel_err
from runtime.kernels.rmsnorm import fused_add_rmsnorm, qk_norm_rope
from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference, qk_norm_rope_reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]
BF16 = torch.bfloat16


@pytest.mark.parametrize("hidden", [2048, 1024, 1000])
@pytest.mark.parametrize("tokens", [1, 77, 4096])
def test_fused_add_rmsnorm_matches_reference(tokens: int, hidden: int) -> None:
    pytest.importorskip("triton")
    x, res = (torch.randn(tokens, hidden, device="cuda").to(BF16) for _ in range(2))
    weight = (1 + 0.1 * torch.randn(hidden, device="cuda")).to(BF16)
    got, ref = fused_add_rmsnorm(x, res, weight), add_rmsnorm_reference(x, res, weight)
    assert torch.equal(got.residual, ref.residual)
    assert rel_err(got.normed, ref.normed) < 4e-3
    first = fused_add_rmsnorm(x, None, weight)
    assert first.residual is x and rel_err(first.normed, add_rmsnorm_reference(x, None, weight).normed) < 4e-3


@pytest.mark.parametrize(("q_heads", "kv_heads"), [(32, 4), (16, 2)])
@pytest.mark.parametrize("tokens", [1, 333])
def test_qk_norm_rope_matches_reference_on_fused_qkv_views(tokens: int, q_heads: int, kv_heads: int) -> None:
    pytest.importorskip("triton")
    head_dim = 128
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_dim, device="cuda").to(BF16)
    q = qkv[:, : q_heads * head_dim].view(tokens, q_heads, head_dim)
    k = qkv[:, q_heads * head_dim:(q_heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    qw, kw = ((1 + 0.1 * torch.randn(head_dim, device="cuda")).to(BF16) for _ in range(2))
    angles = torch.rand(tokens, head_dim // 2, device="cuda") * 100
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    got, ref = qk_norm_rope(q, k, qw, kw, cos, sin), qk_norm_rope_reference(q, k, qw, kw, cos, sin)
    assert rel_err(got.q, ref.q) < 5e-3 and rel_err(got.k, ref.k) < 5e-3
