"""Each rank of a TP2 Qwen3.5-MoE reads its slices: put back together, the ranks' Gated-DeltaNet tensors (q, k and
v channels of in_proj_qkv and the conv, z/b/a rows, A_log, dt_bias, out_proj columns), gated attention's q_proj
(query and gate rows per head) and the shared expert's widths give the whole checkpoint's; norms, routers and the
shared expert's gate are whole on both."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_lm import load_hybrid_state_dict
from services.thinker.parallel.plan import plan_rank
from services.thinker.parallel.shard_load import load_rank_state_dict


@pytest.fixture(scope="module")
def loaded(qwen3_5_moe_ckpt: Path) -> tuple[ThinkerConfig, dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    cfg = ThinkerConfig.from_checkpoint(qwen3_5_moe_ckpt)
    full = load_hybrid_state_dict(qwen3_5_moe_ckpt, cfg, "cpu", torch.float32)
    shards = [load_rank_state_dict(qwen3_5_moe_ckpt, plan_rank(cfg, r, 2), "cpu", torch.float32) for r in range(2)]
    return cfg, full, shards


def _qkv(t: torch.Tensor, key_dim: int) -> tuple[torch.Tensor, ...]:
    """Rows [q | k | v] of in_proj_qkv or the conv, as laid out for `key_dim` key channels."""
    return t[:key_dim], t[key_dim:2 * key_dim], t[2 * key_dim:]


def test_deltanet_tensors_split_by_heads_with_their_conv_channels(loaded) -> None:
    cfg, full, shards = loaded
    layer = f"layers.{cfg.hybrid.linear_layers[0]}.linear_attn."
    for name in ("in_proj_qkv.weight", "conv1d.weight"):
        parts = [_qkv(s[layer + name], cfg.hybrid.key_dim // 2) for s in shards]
        for whole, halves in zip(_qkv(full[layer + name], cfg.hybrid.key_dim), zip(*parts)):
            assert torch.equal(torch.cat(halves), whole), name
    for name in ("in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight", "A_log", "dt_bias"):
        assert torch.equal(torch.cat([s[layer + name] for s in shards]), full[layer + name]), name
    out = layer + "out_proj.weight"
    assert torch.equal(torch.cat([s[out] for s in shards], dim=1), full[out])
    assert all(torch.equal(s[layer + "norm.weight"], full[layer + "norm.weight"]) for s in shards)


def test_gated_attention_and_shared_expert_split_replicated_parts_whole(loaded) -> None:
    cfg, full, shards = loaded
    attn = f"layers.{cfg.hybrid.full_layers[0]}.self_attn."
    assert torch.equal(torch.cat([s[attn + "q_proj.weight"] for s in shards]), full[attn + "q_proj.weight"])
    assert shards[1][attn + "q_proj.weight"].shape[0] == cfg.num_heads * cfg.head_dim  # 2 of 4 heads, with gates
    mlp = "layers.0.mlp."
    for name in ("shared_expert.gate_proj.weight", "shared_expert.up_proj.weight"):
        assert torch.equal(torch.cat([s[mlp + name] for s in shards]), full[mlp + name]), name
    down = mlp + "shared_expert.down_proj.weight"
    assert torch.equal(torch.cat([s[down] for s in shards], dim=1), full[down])
    for name in (mlp + "shared_expert_gate.weight", mlp + "gate.weight", "layers.0.input_layernorm.weight",
                 attn + "q_norm.weight", "norm.weight"):
        assert all(torch.equal(s[name], full[name]) for s in shards), name
    assert "embed_tokens.weight" in shards[0] and "embed_tokens.weight" not in shards[1]
