"""GPU: fused residual-add + RMSNorm (alone and with the MoE router) and q/k norm + rotary (alone and storing k/v in
the paged cache) in Triton against the reference, in bf16."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.unit.kernels.kernel_data import needs_cuda, rel_err
from runtime.kernels.rmsnorm import fused_add_rmsnorm, fused_add_rmsnorm_router, qk_norm_rope, qk_norm_rope_cache
from runtime.kernels.rmsnorm_reference import (
    add_rmsnorm_reference, add_rmsnorm_router_reference, qk_norm_rope_cache_reference, qk_norm_rope_reference,
)

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


@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("tokens", [1, 4, 8, 77])  # the fused kernel up to 8 rows, norm + router GEMM past it
def test_add_rmsnorm_router_matches_reference(tokens: int, with_residual: bool) -> None:
    pytest.importorskip("triton")
    x, res = (torch.randn(tokens, 2048, device="cuda").to(BF16) for _ in range(2))
    residual = res if with_residual else None
    weight = (1 + 0.1 * torch.randn(2048, device="cuda")).to(BF16)
    router = (torch.randn(128, 2048, device="cuda") / 2048**0.5).to(BF16)
    got = fused_add_rmsnorm_router(x, residual, weight, router)
    ref = add_rmsnorm_router_reference(x, residual, weight, router)
    plain = fused_add_rmsnorm(x, residual, weight)
    assert torch.equal(got.residual, ref.residual) and torch.equal(got.normed, plain.normed)  # the same norm math
    assert rel_err(got.normed, ref.normed) < 4e-3
    assert rel_err(got.logits, F.linear(got.normed, router)) < 1e-2 and rel_err(got.logits, ref.logits) < 1.5e-2


@pytest.mark.parametrize("tokens", [1, 5, 300])
def test_qk_norm_rope_cache_stores_k_and_v_at_their_slots(tokens: int) -> None:
    pytest.importorskip("triton")
    q_heads, kv_heads, head_dim, block_size, blocks = 32, 4, 128, 16, 40
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_dim, device="cuda").to(BF16)
    q = qkv[:, : q_heads * head_dim].view(tokens, q_heads, head_dim)
    k = qkv[:, q_heads * head_dim:(q_heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    v = qkv[:, (q_heads + kv_heads) * head_dim:].view(tokens, kv_heads, head_dim)
    qw, kw = ((1 + 0.1 * torch.randn(head_dim, device="cuda")).to(BF16) for _ in range(2))
    angles = torch.rand(tokens, head_dim // 2, device="cuda") * 100
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    cache = torch.randn(2, blocks, block_size, kv_heads, head_dim, device="cuda").to(BF16)
    slots = torch.randperm(blocks * block_size, device="cuda")[:tokens]
    got_cache, ref_cache = cache.clone(), cache.clone()
    q_got = qk_norm_rope_cache(q, k, v, qw, kw, cos, sin, got_cache, slots)
    q_ref = qk_norm_rope_cache_reference(q, k, v, qw, kw, cos, sin, ref_cache, slots)
    plain = qk_norm_rope(q, k, qw, kw, cos, sin)
    flat = got_cache.view(2, blocks * block_size, kv_heads, head_dim)
    assert torch.equal(q_got, plain.q) and torch.equal(flat[0, slots], plain.k)  # the same kernel math
    assert torch.equal(flat[1, slots], v)
    assert rel_err(q_got, q_ref) < 5e-3 and rel_err(got_cache, ref_cache) < 5e-3
    others = torch.ones(blocks * block_size, dtype=torch.bool, device="cuda")
    others[slots] = False
    assert torch.equal(flat[:, others], cache.view(2, blocks * block_size, kv_heads, head_dim)[:, others])
