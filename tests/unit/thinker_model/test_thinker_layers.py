"""Thinker building blocks: M-RoPE frequency axes, MoE against a naive per-token sum, expert fusion, the dense MLP's
gate/up fusion, forward guards."""
from __future__ import annotations

import pytest
import torch

from runtime.attention import allocate_kv_cache, build_attention_context
from services.thinker.model import DeepstackInput, ThinkerConfig, ThinkerLM
from services.thinker.model.checkpoint import fuse_experts
from services.thinker.model.mlp import DenseMLP
from services.thinker.model.moe import SparseMoE
from services.thinker.model.rope import frequency_axes
from tests.unit.thinker_model.thinker_tiny_config import tiny_config


def test_frequency_axes_interleave_t_h_w_then_t() -> None:
    axes = frequency_axes((24, 20, 20))
    assert axes.bincount().tolist() == [24, 20, 20]
    assert axes[:6].tolist() == [0, 1, 2, 0, 1, 2] and axes[60:].tolist() == [0, 0, 0, 0]
    assert frequency_axes((2, 1, 1)).tolist() == [0, 1, 2, 0]


def random_model(cfg: ThinkerConfig, seed: int = 0) -> ThinkerLM:
    torch.manual_seed(seed)
    model = ThinkerLM(cfg).eval().requires_grad_(False)
    for p in model.parameters():
        p.normal_(0.0, 0.3)
    return model


def test_moe_equals_naive_per_token_expert_sum() -> None:
    cfg = tiny_config()
    moe = random_model(cfg).layers[0].mlp
    assert isinstance(moe, SparseMoE)
    x = torch.randn(9, cfg.hidden_size)
    probs = torch.softmax(x @ moe.gate.weight.T, dim=-1)
    expected = torch.zeros_like(x)
    for t in range(x.shape[0]):
        weights, experts = probs[t].topk(cfg.num_experts_per_tok)
        for w, e in zip(weights / weights.sum(), experts.tolist()):
            gate, up = (moe.gate_up_proj[e] @ x[t]).chunk(2)
            expected[t] += w * (moe.down_proj[e] @ (torch.nn.functional.silu(gate) * up))
    torch.testing.assert_close(moe(x), expected, rtol=1e-5, atol=1e-6)


def test_fuse_experts_stacks_gate_over_up_and_passes_fused_through() -> None:
    cfg = tiny_config(num_experts=2, num_experts_per_tok=1)
    tensors = {f"layers.0.mlp.experts.{e}.{p}_proj.weight": torch.full((2, 3), float(10 * e + i))
               for e in range(2) for i, p in enumerate(("gate", "up", "down"))}
    tensors["layers.1.mlp.experts.gate_up_proj"] = torch.zeros(2, 4, 3)
    tensors["norm.weight"] = torch.ones(3)
    fused = fuse_experts(tensors, cfg)
    assert fused["layers.0.mlp.gate_up_proj"][:, :, 0].tolist() == [[0, 0, 1, 1], [10, 10, 11, 11]]
    assert fused["layers.0.mlp.down_proj"][:, 0, 0].tolist() == [2, 12]
    assert fused["layers.1.mlp.gate_up_proj"].shape == (2, 4, 3) and "norm.weight" in fused
    with pytest.raises(KeyError, match="layer 0"):
        fuse_experts({"layers.0.mlp.experts.0.gate_proj.weight": torch.zeros(2, 3)}, cfg)


def run_prefill(model: ThinkerLM, token_ids: list[int], chunks: list[int]) -> torch.Tensor:
    cfg = model.cfg
    kv = allocate_kv_cache(cfg.num_layers, 8, 4, cfg.num_kv_heads, cfg.head_dim, torch.float32, "cpu")
    table, done, logits = [5, 2, 7, 1], 0, []
    for size in chunks:
        ctx = build_attention_context([size], [done + size], [table], 4)
        positions = torch.arange(done, done + size).expand(3, -1)
        out = model(model.embed(torch.tensor(token_ids[done:done + size])), positions, ctx, kv)
        logits.append(model.compute_logits(out.hidden))
        done += size
    return torch.cat(logits)


def test_dense_mlp_layers_and_chunked_prefill() -> None:
    model = random_model(tiny_config(mlp_only_layers=[1]))
    assert not isinstance(model.layers[1].mlp, SparseMoE)
    tokens = list(range(3, 14))
    one_shot = run_prefill(model, tokens, [11])
    assert one_shot.dtype == torch.float32 and one_shot.shape == (11, 256)
    torch.testing.assert_close(run_prefill(model, tokens, [4, 6, 1]), one_shot, rtol=1e-5, atol=1e-6)


def test_dense_mlp_gate_up_fusion_shares_its_weights_and_keeps_the_output() -> None:
    torch.manual_seed(0)
    mlp = DenseMLP(16, 24).requires_grad_(False)
    x = torch.randn(5, 16)
    want = mlp(x)
    keys = set(mlp.state_dict())
    assert torch.allclose(mlp.forward_fused(x), want, atol=1e-6)  # fuses on first use
    fused = mlp.gate_up_weight
    assert fused is not None and fused.shape == (48, 16)
    # gate/up are views of the fused weight: one copy, and a later in-place load reaches the fused GEMM
    assert mlp.gate_proj.weight.data_ptr() == fused.data_ptr()
    assert mlp.up_proj.weight.data_ptr() == fused[24:].data_ptr()
    mlp.up_proj.weight.mul_(2.0)
    assert torch.allclose(mlp.forward_fused(x), mlp(x), atol=1e-6)
    assert set(mlp.state_dict()) == keys  # checkpoints still see gate_proj / up_proj


def test_forward_guards() -> None:
    model = random_model(tiny_config())
    cfg = model.cfg
    kv = allocate_kv_cache(cfg.num_layers, 2, 4, cfg.num_kv_heads, cfg.head_dim, torch.float32, "cpu")
    ctx = build_attention_context([2], [2], [[0]], 4)
    x, pos = model.embed(torch.tensor([1, 2])), torch.arange(2).expand(3, -1)
    with pytest.raises(ValueError, match="kv_caches"):
        model(x, pos, ctx, kv[:2])
    with pytest.raises(ValueError, match="capture_layer"):
        model(x, pos, ctx, kv, capture_layer=0)
    too_many = DeepstackInput(torch.tensor([0]), [torch.zeros(1, cfg.hidden_size)] * 4)
    with pytest.raises(ValueError, match="deepstack"):
        model(x, pos, ctx, kv, deepstack=too_many)
