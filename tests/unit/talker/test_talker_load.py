"""Checkpoint tensor plumbing: per-expert tensors fuse in id order; a tied codec head falls back to the embedding."""
from __future__ import annotations

import pytest
import torch

from services.talker.model.load import fuse_experts, split_talker_state


def test_fuse_experts_stacks_gate_over_up() -> None:
    state = {}
    for e in range(3):
        state[f"layers.0.mlp.experts.{e}.gate_proj.weight"] = torch.full((2, 4), float(e))
        state[f"layers.0.mlp.experts.{e}.up_proj.weight"] = torch.full((2, 4), 10.0 + e)
        state[f"layers.0.mlp.experts.{e}.down_proj.weight"] = torch.full((4, 2), 20.0 + e)
    fused = fuse_experts({**state, "norm.weight": torch.ones(4)})
    assert fused["layers.0.mlp.experts.gate_up_proj"].shape == (3, 4, 4)
    assert fused["layers.0.mlp.experts.gate_up_proj"][2, :2].eq(2).all()
    assert fused["layers.0.mlp.experts.gate_up_proj"][2, 2:].eq(12).all()
    assert fused["layers.0.mlp.experts.down_proj"][1].eq(21).all() and "norm.weight" in fused


def test_missing_expert_is_reported() -> None:
    state = {f"layers.0.mlp.experts.1.{p}_proj.weight": torch.ones(1) for p in ("gate", "up", "down")}
    with pytest.raises(ValueError, match="not 0..E-1"):
        fuse_experts(state)


def test_split_and_tied_head() -> None:
    emb = torch.randn(5, 3)
    lm, predictor = split_talker_state({
        "model.codec_embedding.weight": emb, "code_predictor.model.norm.weight": torch.ones(3),
        "code_predictor.lm_head.0.weight": torch.ones(2, 3),
    })  # fmt: skip
    assert torch.equal(lm["codec_head.weight"], emb)
    assert set(predictor) == {"norm.weight", "lm_head.0.weight"}
