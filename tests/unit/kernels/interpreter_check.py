"""Runs every Triton kernel on CPU in Triton's interpreter (fp32 and fp16, tiny shapes) against its reference.

Started by test_kernel_triton_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before
triton is imported. bf16 is left to the GPU tests: the interpreter mishandles bf16 dots.
"""
from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.runtime.interpreter as interpreter  # noqa: E402

from tests.unit.kernels.kernel_data import check_alignment, paged_case, rel_err, skewed_routing  # noqa: E402


def patch_numpy_scalars() -> None:
    """Triton 3.6's interpreter calls int() on 1-element arrays, which NumPy >= 2.4 refuses: take the element."""
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return

    def patched(tensor, scope) -> None:  # noqa: ANN001
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched


def check_moe(dtype: torch.dtype) -> None:
    from runtime.kernels.moe_align import align_torch
    from runtime.kernels.moe_config import GemmConfig, MoeConfig
    from runtime.kernels.moe_reference import SharedExpert, experts_reference, fused_moe_reference
    from runtime.kernels.moe_align_triton import align_triton_parallel, align_triton_small
    from runtime.kernels.moe_route_triton import topk_softmax_triton
    from runtime.kernels.moe_reference import topk_softmax_reference
    from runtime.kernels.moe_triton import experts_triton, fused_moe_triton

    gen = torch.Generator().manual_seed(0)
    tokens, hidden, inter, experts, top_k = 13, 64, 48, 8, 3
    x = torch.randn(tokens, hidden, generator=gen)
    router = torch.randn(experts, hidden, generator=gen)
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen) / 8
    w_down = torch.randn(experts, hidden, inter, generator=gen) / 8
    shared = SharedExpert(torch.randn(80, hidden, generator=gen) / 8, torch.randn(hidden, 40, generator=gen) / 8,
                          torch.randn(1, hidden, generator=gen) / 8)
    logits = x @ router.T
    got, ref = topk_softmax_triton(logits, top_k), topk_softmax_reference(logits, top_k)
    assert torch.equal(got.topk_ids, ref.topk_ids) and rel_err(got.topk_weights, ref.topk_weights) < 1e-6
    routing = skewed_routing(tokens, experts, top_k, hot=5, dtype=torch.float32, device="cpu")
    for block_m in (16, 32):
        expected = align_torch(routing.topk_ids, experts, block_m).expert_ids
        for align, ordered in ((align_triton_small, True), (align_triton_parallel, False)):
            got = align(routing.topk_ids, experts, block_m)
            check_alignment(got.sorted_ids, got.expert_ids, int(got.num_padded), routing.topk_ids, experts, block_m,
                            ordered)
            assert torch.equal(got.expert_ids, expected)
    cast = [t.to(dtype) for t in (x, router, w_gate_up, w_down)]
    tol = 1e-5 if dtype == torch.float32 else 3e-3
    for cfg in (MoeConfig(16, GemmConfig(16, 32, 4, 2), GemmConfig(32, 16, 4, 2), 1024),
                MoeConfig(32, GemmConfig(32, 128, 4, 2), GemmConfig(32, 32, 4, 2), 0)):  # uneven K, parallel grouping
        for sh in (None, shared):
            out = fused_moe_triton(*cast, top_k, True, sh and SharedExpert(*(t.to(dtype) for t in sh)), cfg)
            assert rel_err(out, fused_moe_reference(x, router, w_gate_up, w_down, top_k, True, sh)) < tol, cfg
        skew = experts_triton(cast[0], routing._replace(topk_weights=routing.topk_weights.to(dtype)),
                              cast[2], cast[3], cfg)
        assert rel_err(skew, experts_reference(x, routing, w_gate_up, w_down)) < tol


def check_attention(dtype: torch.dtype) -> None:
    from runtime.kernels.paged_attention_reference import paged_attention_reference
    from runtime.kernels.paged_attention_triton import paged_attention_triton

    tol = 1e-5 if dtype == torch.float32 else 3e-3
    for q_lens, kv_lens in (([3, 1, 7, 1], [150, 200, 7, 1]), ([1, 1, 1], [1, 70, 140])):
        case = paged_case(q_lens, kv_lens, 8, 2, 32, 4, dtype, "cpu", seed=len(q_lens))
        ref = paged_attention_reference(case.q.float(), case.kv_cache.float(), case.block_tables, case.kv_lens,
                                        case.cu_seqlens_q)
        for splits in (1, 3):
            out = paged_attention_triton(case.q, case.kv_cache, case.block_tables, case.kv_lens, case.cu_seqlens_q,
                                         case.max_seqlen_q, num_splits=splits)
            assert rel_err(out, ref) < tol, (q_lens, splits)


def check_norms(dtype: torch.dtype) -> None:
    from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference, qk_norm_rope_reference
    from runtime.kernels.rmsnorm_triton import fused_add_rmsnorm_triton, qk_norm_rope_triton

    gen = torch.Generator().manual_seed(2)
    x, res, w = (torch.randn(*s, generator=gen).to(dtype) for s in ((5, 48), (5, 48), (48,)))
    for residual in (None, res):
        got, ref = fused_add_rmsnorm_triton(x, residual, w), add_rmsnorm_reference(x, residual, w)
        assert torch.equal(got.residual, ref.residual) and rel_err(got.normed, ref.normed) < 2e-3
    qkv = torch.randn(5, 160, generator=gen).to(dtype)
    q, k = qkv[:, :96].view(5, 6, 16), qkv[:, 96:128].view(5, 2, 16)
    qw, kw, cos, sin = (torch.randn(*s, generator=gen) for s in ((16,), (16,), (5, 16), (5, 16)))
    got = qk_norm_rope_triton(q, k, qw.to(dtype), kw.to(dtype), cos, sin)
    ref = qk_norm_rope_reference(q, k, qw.to(dtype), kw.to(dtype), cos, sin)
    assert rel_err(got.q, ref.q) < 2e-3 and rel_err(got.k, ref.k) < 2e-3


if __name__ == "__main__":
    patch_numpy_scalars()
    torch.set_num_threads(1)  # tiny shapes: threads only contend on a shared CPU
    for dtype in (torch.float32, torch.float16):
        check_moe(dtype)
        check_attention(dtype)
        check_norms(dtype)
    print("interpreter checks passed")
    sys.exit(0)
