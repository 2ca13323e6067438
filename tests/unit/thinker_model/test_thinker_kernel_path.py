"""The Thinker's GPU (kernel) path selection and wiring, on CPU: runtime.kernels falls back to its references there,
so the fused-residual layout, the q/k/v fusion, deepstack and the talker capture must give the reference's numbers."""
from __future__ import annotations

import pytest
import torch

from runtime.attention import allocate_kv_cache, build_attention_context, paged_attention
from services.thinker.model import DeepstackInput, ThinkerConfig, ThinkerLM
from runtime.kernels.rmsnorm import rope_kernel_fits
from services.thinker.model.kernel_path import kernel_attention, kernels_available
from tests.unit.thinker_model.thinker_tiny_config import tiny_config


def random_state(cfg: ThinkerConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = ThinkerLM(cfg)
    return {k: v.normal_(0.0, 0.3) if not k.endswith("norm.weight") else 1 + 0.1 * torch.randn_like(v)
            for k, v in model.state_dict().items()}


def run(model: ThinkerLM, deepstack: DeepstackInput | None, capture_layer: int | None) -> tuple[torch.Tensor, ...]:
    cfg = model.cfg
    kv = allocate_kv_cache(cfg.num_layers, 16, 4, cfg.num_kv_heads, cfg.head_dim, torch.float32, "cpu")
    ctx = build_attention_context([5, 1, 3], [5, 1, 3], [[3, 7], [1], [9]], 4)
    ids = torch.tensor([5, 9, 2, 44, 17, 3, 250, 8, 100])
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 0, 1, 2], [0, 1, 1, 3, 4, 0, 0, 1, 1], [0, 1, 2, 2, 4, 0, 0, 2, 2]])
    with torch.inference_mode():
        out = model(model.embed(ids), positions, ctx, kv, deepstack=deepstack, capture_layer=capture_layer)
        logits = model.compute_logits(out.hidden)
    captured = out.captured if out.captured is not None else torch.zeros(0)
    return logits, captured, torch.stack(kv)


@pytest.mark.parametrize("layout", ["plain", "deepstack_and_capture"])
def test_kernel_path_on_cpu_equals_reference(layout: str) -> None:
    cfg = tiny_config()
    state = random_state(cfg)
    ref = ThinkerLM.from_state_dict(cfg, dict(state))
    fast = ThinkerLM.from_state_dict(cfg, dict(state), use_kernels=True)
    assert not ref.use_kernels and fast.use_kernels
    deepstack, capture = None, None
    if layout != "plain":
        gen = torch.Generator().manual_seed(1)
        deepstack = DeepstackInput(torch.tensor([1, 2, 7]), [torch.randn(3, cfg.hidden_size, generator=gen)
                                                             for _ in range(2)])
        capture = 2
    for got, want in zip(run(fast, deepstack, capture), run(ref, deepstack, capture)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_o_proj_takes_the_skinny_gemm_where_k_is_twice_its_outputs() -> None:
    from torch import nn

    from services.thinker.model.attention import ThinkerAttention

    class RankSlice(nn.Linear):  # a tensor-parallel o_proj sums over its ranks in its own forward
        pass

    wide = ThinkerAttention(tiny_config(num_attention_heads=8))  # 8 heads x 8 = 64 -> 32
    assert wide.o_on_skinny_gemm() and not ThinkerAttention(tiny_config()).o_on_skinny_gemm()  # 32 -> 32
    assert not ThinkerAttention(tiny_config(num_attention_heads=8, attention_bias=True)).o_on_skinny_gemm()
    wide.o_proj = RankSlice(64, 32, bias=False)
    assert not wide.o_on_skinny_gemm()


def test_qkv_fusion_keeps_one_copy_and_the_state_dict() -> None:
    cfg = tiny_config()
    state = random_state(cfg)
    fast = ThinkerLM.from_state_dict(cfg, dict(state), use_kernels=True)
    attn = fast.layers[0].self_attn
    assert attn.qkv_weight is not None and attn.backend is kernel_attention
    assert attn.q_proj.weight.data_ptr() == attn.qkv_weight.data_ptr()  # a view, not a second copy
    assert attn.v_proj.weight.untyped_storage().data_ptr() == attn.qkv_weight.untyped_storage().data_ptr()
    saved = fast.state_dict()
    assert saved.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(saved[name], tensor), name


def test_a_custom_backend_is_kept_on_the_kernel_path() -> None:
    calls = []

    def backend(q, k, v, kv_cache, ctx, scale):  # noqa: ANN001, ANN202
        calls.append(q.shape)
        return paged_attention(q, k, v, kv_cache, ctx, scale)

    cfg = tiny_config()
    fast = ThinkerLM.from_state_dict(cfg, random_state(cfg), backend=backend, use_kernels=True)
    run(fast, None, None)
    assert len(calls) == cfg.num_layers


def test_path_is_chosen_by_device_and_dtype() -> None:
    assert not kernels_available("cpu", torch.bfloat16)
    assert not kernels_available("cuda", torch.float32)  # fp32 on CUDA stays the exact reference
    assert kernels_available("cuda", torch.bfloat16) == kernels_available("cuda", torch.float16)
    assert not ThinkerLM.from_state_dict(tiny_config(), random_state(tiny_config())).use_kernels
    assert rope_kernel_fits(128) and rope_kernel_fits(8) and not rope_kernel_fits(96)


def test_rope_outside_the_fused_kernel_still_matches() -> None:
    """head_dim 12: its half (6) is no power of two, so the GPU path does q/k norm and rope in plain ops."""
    cfg = tiny_config(head_dim=12, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                    "mrope_section": [2, 2, 2]})
    state = random_state(cfg)
    ref = ThinkerLM.from_state_dict(cfg, dict(state))
    fast = ThinkerLM.from_state_dict(cfg, dict(state), use_kernels=True)
    for got, want in zip(run(fast, None, None), run(ref, None, None)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
