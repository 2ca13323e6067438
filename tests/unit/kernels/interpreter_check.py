"""Runs every Triton kernel on CPU in Triton's interpreter (fp32 and fp16, tiny shapes) against its reference.

Started by test_kernel_triton_interpreter.py in a fresh process, because TRITON_INTERPRET must be set before
triton is imported. bf16 is left to the GPU tests: the interpreter mishandles bf16 dots.
"""
from __future__ import annotations

import importlib.util
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.runtime.interpreter as interpreter  # noqa: E402

from tests.unit.kernels.kernel_data import (  # noqa: E402
    check_alignment, paged_case, rel_err, skewed_logits, skewed_routing,
)


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
    from runtime.kernels.moe_align_triton import align_triton
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
    tied = topk_softmax_triton(torch.zeros(2, experts), top_k)  # equal probabilities: the lowest experts, in order
    assert torch.equal(tied.topk_ids, torch.arange(top_k, dtype=torch.int32).expand(2, top_k))
    routing = skewed_routing(tokens, experts, top_k, hot=5, dtype=torch.float32, device="cpu")
    for block_m in (16, 32):
        expected = align_torch(routing.topk_ids, experts, block_m).expert_ids
        got = align_triton(routing.topk_ids, experts, block_m)
        check_alignment(got.sorted_ids, got.expert_ids, int(got.num_padded), routing.topk_ids, experts, block_m,
                        ordered=False)
        assert torch.equal(got.expert_ids, expected)
    cast = [t.to(dtype) for t in (x, router, w_gate_up, w_down)]
    tol = 1e-5 if dtype == torch.float32 else 3e-3
    for cfg in (MoeConfig(16, GemmConfig(16, 32, 4, 2), GemmConfig(32, 16, 4, 2)),
                MoeConfig(32, GemmConfig(32, 128, 4, 2), GemmConfig(32, 32, 4, 2))):  # uneven K
        for sh in (None, shared):
            out = fused_moe_triton(*cast, top_k, True, sh and SharedExpert(*(t.to(dtype) for t in sh)), cfg)
            assert rel_err(out, fused_moe_reference(x, router, w_gate_up, w_down, top_k, True, sh)) < tol, cfg
        skew = experts_triton(cast[0], routing._replace(topk_weights=routing.topk_weights.to(dtype)),
                              cast[2], cast[3], cfg)
        assert rel_err(skew, experts_reference(x, routing, w_gate_up, w_down)) < tol


def check_small_moe(dtype: torch.dtype) -> None:
    """The two-launch small path (top-k in gate_up, top-k sum in down) on ragged loads: one expert every token uses,
    a few busy ones, most empty; batches of 1, of shared experts, and of 13 tokens (small path forced)."""
    from runtime.kernels.moe_config import GemmConfig, MoeConfig
    from runtime.kernels.moe_reference import SharedExpert, fused_moe_reference, routed_moe_reference
    from runtime.kernels.moe_small_triton import experts_small_triton, plan_down
    from runtime.kernels.moe_triton import fused_moe_triton, routed_moe_triton

    gen = torch.Generator().manual_seed(3)
    hidden, inter, experts, top_k = 64, 48, 8, 3
    router = torch.randn(experts, hidden, generator=gen)
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen) / 8
    w_down = torch.randn(experts, hidden, inter, generator=gen) / 8
    weights = [t.to(dtype) for t in (w_gate_up, w_down)]
    tol = 1e-5 if dtype == torch.float32 else 3e-3
    # few, wide tiles: the interpreter pays per program (every gate_up program routes the batch)
    small = MoeConfig(16, GemmConfig(16, 32, 4, 2), GemmConfig(32, 16, 4, 2), small_max_tokens=16,
                      small_gate_up=GemmConfig(64, 32, 4, 2), small_down=GemmConfig(32, 32, 4, 2))  # down K uneven
    uneven = small._replace(small_gate_up=GemmConfig(32, 128, 4, 2), small_down=GemmConfig(64, 64, 4, 2))
    for tokens, cfg, renorm in ((1, small, True), (5, uneven, False), (13, small, True)):
        x = torch.randn(tokens, hidden, generator=gen)
        logits = skewed_logits(tokens, experts, top_k, hot=tokens % experts, dtype=torch.float32, device="cpu",
                               seed=tokens)
        out = routed_moe_triton(x.to(dtype), logits.to(dtype), *weights, top_k, renorm, None, cfg)
        assert rel_err(out, routed_moe_reference(x, logits, w_gate_up, w_down, top_k, renorm)) < tol, tokens
    # the rule's grids at the Thinker's shape (132 SMs): two programs an SM, none past the arrival counters
    assert plan_down(1, 2048, 768, 8, GemmConfig(32, 128, 4, 4), 132) == (64, 5, 10)
    assert plan_down(4, 2048, 768, 8, GemmConfig(32, 128, 4, 4), 132).splits == 2
    assert plan_down(1, 16 * 4097, 768, 8, GemmConfig(16, 128, 4, 4), 132, splits=4).splits == 1
    # down's loop split explicitly (the rule splits every one of these few-program launches): none, even and ragged
    # splits of its 3 experts x 2 K steps, the last K step uneven
    fine = (GemmConfig(32, 16, 4, 2), GemmConfig(16, 32, 4, 2))
    for tokens, splits in ((1, 1), (1, 4), (5, 6), (6, 5)):
        x = torch.randn(tokens, hidden, generator=gen)
        logits = skewed_logits(tokens, experts, top_k, hot=2, dtype=torch.float32, device="cpu", seed=tokens)
        out = experts_small_triton(x.to(dtype), logits.to(dtype), *weights, top_k, True, *fine, splits=splits)
        ref = routed_moe_reference(x, logits, w_gate_up, w_down, top_k, True)
        assert rel_err(out, ref) < tol, (tokens, splits)
    x = torch.randn(6, hidden, generator=gen)
    same = torch.randn(1, experts, generator=gen).expand(6, experts).contiguous()  # every token the same k experts
    out = routed_moe_triton(x.to(dtype), same.to(dtype), *weights, top_k, True, None, small)
    assert rel_err(out, routed_moe_reference(x, same, w_gate_up, w_down, top_k)) < tol
    x = torch.randn(4, hidden, generator=gen)
    shared = SharedExpert(torch.randn(80, hidden, generator=gen) / 8, torch.randn(hidden, 40, generator=gen) / 8,
                          torch.randn(1, hidden, generator=gen) / 8)
    out = fused_moe_triton(x.to(dtype), router.to(dtype), *weights, top_k, True,
                           SharedExpert(*(t.to(dtype) for t in shared)), small._replace(small_max_tokens=4))
    assert rel_err(out, fused_moe_reference(x, router, w_gate_up, w_down, top_k, True, shared)) < tol


def check_attention(dtype: torch.dtype) -> None:
    """Prefill and decode tiles, with no splits and with splits (some left empty by a short sequence or a large
    min_split_keys), against the reference."""
    from runtime.kernels.paged_attention_reference import paged_attention_reference
    from runtime.kernels.paged_attention_triton import compile_prefill_variants, paged_attention_triton

    tol = 1e-5 if dtype == torch.float32 else 3e-3
    cases = (  # (q_lens, kv_lens, [(splits, min split keys)])
        ([3, 1, 7, 1], [150, 200, 7, 1], [(1, 64), (3, 64)]),  # prefill tiles
        ([1, 1, 1], [1, 70, 140], [(3, 64)]),  # 1, 2 and 3 used splits
        ([1, 1], [300, 40], [(8, 64), (8, 128)]),  # 5 or 3 used splits; 1 covering
    )
    for q_lens, kv_lens, variants in cases:
        case = paged_case(q_lens, kv_lens, 8, 2, 32, 4, dtype, "cpu", seed=len(q_lens))
        ref = paged_attention_reference(case.q.float(), case.kv_cache.float(), case.block_tables, case.kv_lens,
                                        case.cu_seqlens_q)
        for splits, min_keys in variants:
            out = paged_attention_triton(case.q, case.kv_cache, case.block_tables, case.kv_lens, case.cu_seqlens_q,
                                         case.max_seqlen_q, num_splits=splits, min_split_keys=min_keys)
            assert rel_err(out, ref) < tol, (q_lens, splits, min_keys)
    compile_prefill_variants(8, 2, 32, 4, dtype, torch.device("cpu"))  # runs every prefill split count


def check_norms(dtype: torch.dtype) -> None:
    from runtime.kernels.rmsnorm_reference import (
        add_rmsnorm_reference, add_rmsnorm_router_reference, qk_norm_rope_cache_reference, qk_norm_rope_reference,
    )
    from runtime.kernels.rmsnorm_triton import (
        fused_add_rmsnorm_router_triton, fused_add_rmsnorm_triton, qk_norm_rope_cache_triton, qk_norm_rope_triton,
    )

    gen = torch.Generator().manual_seed(2)
    x, res, w = (torch.randn(*s, generator=gen).to(dtype) for s in ((5, 48), (5, 48), (48,)))
    router = torch.randn(6, 48, generator=gen).to(dtype)  # 6 experts: the last expert block is partial
    for residual, zero_centred in ((None, False), (res, False), (None, True), (res, True)):
        got = fused_add_rmsnorm_triton(x, residual, w, zero_centred=zero_centred)
        ref = add_rmsnorm_reference(x, residual, w, zero_centred=zero_centred)
        assert torch.equal(got.residual, ref.residual) and rel_err(got.normed, ref.normed) < 2e-3
        got = fused_add_rmsnorm_router_triton(x, residual, w, router, zero_centred=zero_centred)
        ref = add_rmsnorm_router_reference(x, residual, w, router, zero_centred=zero_centred)
        assert torch.equal(got.residual, ref.residual) and rel_err(got.normed, ref.normed) < 2e-3
        assert rel_err(got.logits, ref.logits) < 2e-3
    qkv = torch.randn(5, 160, generator=gen).to(dtype)
    q, k, v = qkv[:, :96].view(5, 6, 16), qkv[:, 96:128].view(5, 2, 16), qkv[:, 128:].view(5, 2, 16)
    qw, kw, cos, sin = (torch.randn(*s, generator=gen) for s in ((16,), (16,), (5, 16), (5, 16)))
    got = qk_norm_rope_triton(q, k, qw.to(dtype), kw.to(dtype), cos, sin)
    ref = qk_norm_rope_reference(q, k, qw.to(dtype), kw.to(dtype), cos, sin)
    assert rel_err(got.q, ref.q) < 2e-3 and rel_err(got.k, ref.k) < 2e-3
    slots = torch.tensor([9, 0, 31, 4, 17])  # cache of 4 blocks x 8 slots, tokens scattered over blocks
    cache = torch.randn(2, 4, 8, 2, 16, generator=gen).to(dtype)
    caches = [cache.clone(), cache.clone()]
    q_got = qk_norm_rope_cache_triton(q, k, v, qw.to(dtype), kw.to(dtype), cos, sin, caches[0], slots)
    q_ref = qk_norm_rope_cache_reference(q, k, v, qw.to(dtype), kw.to(dtype), cos, sin, caches[1], slots)
    assert rel_err(q_got, q_ref) < 2e-3 and rel_err(caches[0], caches[1]) < 2e-3
    flat = caches[0].view(2, 32, 2, 16)  # [K/V, slot, Hkv, D]
    others = [i for i in range(32) if i not in slots.tolist()]
    assert torch.equal(flat[1, slots], v) and torch.equal(flat[:, others], cache.view(2, 32, 2, 16)[:, others])


def check_deltanet_parts(dtype: torch.dtype) -> None:
    """Gated DeltaNet's output norm and its width-4 causal conv decode step (Qwen3.5)."""
    from runtime.kernels.causal_conv import causal_conv_decode_reference
    from runtime.kernels.causal_conv_triton import causal_conv_decode_triton
    from runtime.kernels.gated_rmsnorm import gated_rmsnorm_reference
    from runtime.kernels.gated_rmsnorm_triton import gated_rmsnorm_triton

    from runtime.kernels.deltanet_gates import deltanet_gates_reference
    from runtime.kernels.deltanet_gates_triton import deltanet_gates_triton

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 3, 16, generator=gen).to(dtype)  # 15 head rows: a partial block
    proj = torch.randn(5, 70, generator=gen).to(dtype)  # the gate a view of a wider projection output
    gate = proj[:, 10:58].view(5, 3, 16)
    w = (1 + 0.1 * torch.randn(16, generator=gen)).to(dtype)
    assert rel_err(gated_rmsnorm_triton(x, gate, w, 1e-6), gated_rmsnorm_reference(x, gate, w, 1e-6)) < 2e-3
    a, b = proj[:, :6] * 8, proj[:, 60:66]  # a spread past softplus' linear threshold
    a_log, dt_bias = torch.randn(6, generator=gen).to(dtype), torch.randn(6, generator=gen).to(dtype)
    got, ref = deltanet_gates_triton(a, b, a_log, dt_bias), deltanet_gates_reference(a, b, a_log, dt_bias)
    assert got.g.dtype == torch.float32 and rel_err(got.g, ref.g) < 1e-5 and rel_err(got.beta, ref.beta) < 2e-3
    channels, slots = 600, torch.tensor([4, 0, 2])  # 600 channels: two channel blocks, the second partial
    xs = torch.randn(3, channels, generator=gen).to(dtype)
    weight = torch.randn(channels, 4, generator=gen).to(dtype)
    states = torch.randn(5, channels, 3, generator=gen).to(dtype)
    got_states, ref_states = states.clone(), states.clone()
    got = causal_conv_decode_triton(xs, weight, got_states, slots)
    ref = causal_conv_decode_reference(xs, weight, ref_states, slots)
    assert rel_err(got, ref) < 2e-3 and torch.equal(got_states, ref_states)
    assert torch.equal(got_states[[1, 3]], states[[1, 3]])  # slots no row holds are untouched
    check_conv_prefill_rows(dtype, gen)


def check_conv_prefill_rows(dtype: torch.dtype, gen: torch.Generator) -> None:
    """The causal conv over every prefill row at once, Triton against plain torch, on a view of a wider projection
    (as the layer passes it): rows shorter than K-1 read held inputs in the middle of their windows."""
    from runtime.kernels import causal_conv
    from runtime.kernels.causal_conv import causal_conv_prefill_rows, conv_prefill_plan

    channels, counts, slots = 200, [1, 2, 37, 3], [3, 0, 5, 1]  # 37 tokens: two token blocks, the second partial
    x = torch.randn(sum(counts), channels + 30, generator=gen).to(dtype)[:, 10:10 + channels]
    weight = torch.randn(channels, 4, generator=gen).to(dtype)
    states = torch.randn(6, channels, 3, generator=gen).to(dtype)
    plan = conv_prefill_plan(counts, slots, 4, torch.device("cpu"))
    ref_states, got_states = states.clone(), states.clone()
    ref = causal_conv_prefill_rows(x, weight, ref_states, plan)
    use_triton, causal_conv.use_triton = causal_conv.use_triton, lambda *t: True  # the interpreter runs on CPU
    try:
        got = causal_conv_prefill_rows(x, weight, got_states, plan)
    finally:
        causal_conv.use_triton = use_triton
    assert rel_err(got, ref) < 2e-3 and torch.equal(got_states, ref_states)


def check_fla_decode_in_place() -> None:
    """fla's KDA recurrent kernel as our gated-delta decode (runtime/kernels/gated_delta.py): states advanced in
    place at their slots, equal to the reference's gather-step-scatter; fp32 (fla computes in fp32 anyway). Runs
    where fla-core is installed (the GPU machine's wheels): the CPU build leaves it out, because transformers would
    then send its CPU Qwen3.5 reference through fla's kernels."""
    from runtime.kernels.gated_delta import fla_decode_in_place
    from runtime.kernels.gated_delta_reference import recurrent_gated_delta_step

    gen = torch.Generator().manual_seed(4)
    rows, k_heads, v_heads, dk, dv = 3, 2, 4, 16, 32  # 2 key heads shared by 4 value heads, as Qwen3.5 shares them
    proj = torch.randn(rows, 2 * k_heads * dk + v_heads * dv + 8, generator=gen)  # q, k, v as strided views
    q = proj[:, :k_heads * dk].view(rows, k_heads, dk)
    k = proj[:, k_heads * dk:2 * k_heads * dk].view(rows, k_heads, dk)
    v = proj[:, 2 * k_heads * dk:-8].view(rows, v_heads, dv)
    g, beta = -torch.rand(rows, v_heads, generator=gen), torch.rand(rows, v_heads, generator=gen)
    states = torch.randn(6, v_heads, dk, dv, generator=gen) * 0.1
    slots = torch.tensor([3, 0, 5])
    want_states = states.clone()
    step = recurrent_gated_delta_step(q, k, v, g, beta, want_states.index_select(0, slots))
    want_states.index_copy_(0, slots, step.state)
    got = fla_decode_in_place(q, k, v, g, beta, states, slots)
    assert rel_err(got, step.out) < 1e-5 and rel_err(states, want_states) < 1e-5


def check_dense_step(dtype: torch.dtype) -> None:
    """The persistent dense step's phases (one launch each: the interpreter runs programs in turn, where a grid
    barrier would never open) over a frame's steps whose cache grows, against the reference; 3 programs share out
    every phase's tiles and (row, kv head) items; then with o_proj and down split over K (split_narrow 2)."""
    from runtime.kernels.dense_step import DenseStack, DenseStepBuffers, default_tiling, dense_step_reference
    from runtime.kernels.dense_step_triton import launch_dense_step

    gen = torch.Generator().manual_seed(5)
    layers, hidden, heads, kv_heads, d, inter, vocab, positions = 2, 64, 4, 2, 16, 96, 48, 32
    w = lambda *shape: (torch.randn(*shape, generator=gen) * 0.2).to(dtype)  # noqa: E731
    stack = DenseStack(w(layers, (heads + 2 * kv_heads) * d, hidden), w(layers, hidden, heads * d),
                       w(layers, 2 * inter, hidden), w(layers, hidden, inter), 1 + w(layers, hidden),
                       1 + w(layers, hidden), 1 + w(layers, d), 1 + w(layers, d), 1 + w(hidden), heads, kv_heads, d,
                       1e-6)  # fmt: skip
    head = w(vocab, hidden)
    angles = torch.arange(positions).float()[:, None] / (100 ** (torch.arange(0, d, 2).float() / d))
    cos, sin = torch.cat((angles, angles), -1).cos().to(dtype), torch.cat((angles, angles), -1).sin().to(dtype)
    tiling = default_tiling(stack, head)
    for tiling in (tiling, tiling._replace(block_k=16, split_narrow=2)):  # o_proj and down's K ranges in halves
        batch, start = 3, 0
        got, want = DenseStepBuffers.allocate(stack, 4, positions), DenseStepBuffers.allocate(stack, 4, positions)
        for steps in (2, 1, 1):
            x = torch.randn(batch * steps, hidden, generator=gen).to(dtype)
            got.s0[:batch * steps], want.s0[:batch * steps] = x, x
            logits = torch.zeros(batch, vocab)
            launch_dense_step(stack, head, got, batch, steps, start, cos, sin, logits, tiling, sync=False, programs=3)
            reference = dense_step_reference(stack, head, want, batch, steps, start, cos, sin)
            tolerance = 1e-5 if dtype == torch.float32 else 2e-2
            assert rel_err(logits, reference) < tolerance, (dtype, tiling, steps, rel_err(logits, reference))
            assert rel_err(got.cache, want.cache) < tolerance
            assert not got.counter.any(), "split-K arrival counters must be left zero"
            start += steps


if __name__ == "__main__":
    patch_numpy_scalars()
    torch.set_num_threads(1)  # tiny shapes: threads only contend on a shared CPU
    for dtype in (torch.float32, torch.float16):
        check_moe(dtype)
        check_small_moe(dtype)
        check_attention(dtype)
        check_norms(dtype)
        check_deltanet_parts(dtype)
        check_dense_step(dtype)
    if importlib.util.find_spec("fla") is not None:
        check_fla_decode_in_place()
    print("interpreter checks passed")
    sys.exit(0)
