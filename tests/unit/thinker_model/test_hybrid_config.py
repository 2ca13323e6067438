"""Qwen3.5 text_config parsing: layer pattern, partial rotary, no deepstack, and every refusal names its field."""
from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from runtime.checkpoint.qwen3_5.demo_config import demo_config
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_config import FULL, LINEAR


def _config(**text: Any) -> dict[str, Any]:
    root = copy.deepcopy(demo_config())
    for key, value in text.items():
        if value is None:
            root["text_config"].pop(key, None)
        else:
            root["text_config"][key] = value
    return root


def test_demo_config_is_hybrid_with_partial_rotary_and_no_deepstack() -> None:
    cfg = ThinkerConfig.from_dict(_config())
    assert cfg.hybrid is not None
    assert cfg.hybrid.layer_types == (LINEAR, LINEAR, LINEAR, FULL) * 2
    assert cfg.kv_layers == (3, 7) and cfg.hybrid.linear_layers == (0, 1, 2, 4, 5, 6)
    assert (cfg.rope_dim, cfg.mrope_section, cfg.num_deepstack) == (16, (3, 3, 2), 0)
    assert cfg.hybrid.conv_dim == 2 * 2 * 16 + 4 * 16


def test_layer_types_derive_from_full_attention_interval() -> None:
    cfg = ThinkerConfig.from_dict(_config(layer_types=None, full_attention_interval=2))
    assert cfg.hybrid.layer_types == (LINEAR, FULL) * 4


def test_moe_reads_the_shared_expert() -> None:
    cfg = ThinkerConfig.from_dict(demo_config(moe=True))
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.shared_expert_intermediate_size) == (8, 2, 32)
    assert all(cfg.is_moe_layer(i) for i in range(cfg.num_layers))


@pytest.mark.parametrize(("text", "field"), [
    (dict(layer_types=["linear_attention"] * 7 + ["sliding_attention"]), "layer_types"),
    (dict(layer_types=["linear_attention"] * 8), "layer_types"),
    (dict(layer_types=["full_attention"] * 3), "layer_types"),
    (dict(layer_types=None, full_attention_interval=0), "full_attention_interval"),
    (dict(linear_conv_kernel_dim=1), "linear_conv_kernel_dim"),
    (dict(linear_num_value_heads=3), "linear_num_value_heads"),
    (dict(linear_num_key_heads=0), "linear_num_key_heads"),
    (dict(linear_key_head_dim=512), "linear_key_head_dim"),
    (dict(linear_value_head_dim=512), "linear_value_head_dim"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.0}),
     "partial_rotary_factor"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e7}), "rope_type"),
])
def test_unservable_configs_are_refused_naming_the_field(text: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ThinkerConfig.from_dict(_config(**text))


def test_state_slots_past_free_memory_are_refused_naming_the_fields() -> None:
    from services.thinker.model.linear_state import LinearStateCache, check_state_memory

    hybrid = ThinkerConfig.from_dict(_config()).hybrid
    per_slot = LinearStateCache.bytes_per_slot(hybrid, torch.float32)
    check_state_memory(hybrid, 4, torch.float32, "cpu", free_bytes=4 * per_slot)
    with pytest.raises(ValueError, match="num_state_slots"):
        check_state_memory(hybrid, 5, torch.float32, "cpu", free_bytes=4 * per_slot)
