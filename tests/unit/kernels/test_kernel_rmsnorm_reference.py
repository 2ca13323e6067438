"""CPU tests: the RMSNorm and q/k norm + rotary references equal transformers' modules bit for bit."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels.rmsnorm import fused_add_rmsnorm, qk_norm_rope
from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference, qk_norm_rope_reference

modeling = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")


def hf_norm(size: int, weight: torch.Tensor, eps: float = 1e-6) -> torch.nn.Module:
    norm = modeling.Qwen3OmniMoeThinkerTextRMSNorm(size, eps=eps).to(weight.dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rmsnorm_reference_equals_transformers(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    x, res = (torch.randn(7, 64, generator=gen).to(dtype) for _ in range(2))
    weight = torch.randn(64, generator=gen).to(dtype)
    got = add_rmsnorm_reference(x, res, weight)
    with torch.no_grad():
        assert torch.equal(got.normed, hf_norm(64, weight)(x + res))
    assert torch.equal(got.residual, x + res)
    first = fused_add_rmsnorm(x, None, weight)
    assert first.residual is x
    with torch.no_grad():
        assert torch.equal(first.normed, hf_norm(64, weight)(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qk_norm_rope_reference_equals_transformers(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    tokens, q_heads, kv_heads, head_dim = 5, 4, 2, 16
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_dim, generator=gen).to(dtype)
    q = qkv[:, : q_heads * head_dim].view(tokens, q_heads, head_dim)  # strided views of a fused projection
    k = qkv[:, q_heads * head_dim:(q_heads + kv_heads) * head_dim].view(tokens, kv_heads, head_dim)
    qw, kw = (torch.randn(head_dim, generator=gen).to(dtype) for _ in range(2))
    freqs = torch.randn(tokens, head_dim // 2, generator=gen)
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()  # fp32, as the model makes
    got = qk_norm_rope(q, k, qw, kw, cos, sin)
    with torch.no_grad():
        eq, ek = modeling.apply_rotary_pos_emb(
            hf_norm(head_dim, qw)(q), hf_norm(head_dim, kw)(k), cos.to(dtype), sin.to(dtype), unsqueeze_dim=1
        )
    assert torch.equal(got.q, eq) and torch.equal(got.k, ek)
    assert torch.equal(got.q, qk_norm_rope_reference(q, k, qw, kw, cos, sin).q)


def test_norm_with_router_and_norm_rope_with_cache_on_cpu_are_their_references() -> None:
    from runtime.attention.kv_cache import write_kv
    from runtime.kernels.rmsnorm import fused_add_rmsnorm_router, qk_norm_rope_cache

    gen = torch.Generator().manual_seed(2)
    x, res = (torch.randn(3, 32, generator=gen) for _ in range(2))
    weight, router = torch.randn(32, generator=gen), torch.randn(6, 32, generator=gen)
    for residual in (None, res):
        got = fused_add_rmsnorm_router(x, residual, weight, router)
        ref = add_rmsnorm_reference(x, residual, weight)
        assert torch.equal(got.normed, ref.normed) and torch.equal(got.residual, ref.residual)
        assert torch.equal(got.logits, torch.nn.functional.linear(ref.normed, router))
    q, k, v = torch.randn(3, 4, 8, generator=gen), torch.randn(3, 2, 8, generator=gen), torch.randn(3, 2, 8)
    qw, kw, cos, sin = (torch.randn(*s, generator=gen) for s in ((8,), (8,), (3, 8), (3, 8)))
    cache, expected = torch.zeros(2, 4, 4, 2, 8), torch.zeros(2, 4, 4, 2, 8)
    slots = torch.tensor([5, 0, 14])
    q_got = qk_norm_rope_cache(q, k, v, qw, kw, cos, sin, cache, slots)
    plain = qk_norm_rope_reference(q, k, qw, kw, cos, sin)
    write_kv(expected, plain.k, v, slots)
    assert torch.equal(q_got, plain.q) and torch.equal(cache, expected)
