"""ThinkerConfig: reading both rope spellings, id fallbacks, and every validation error."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from services.thinker.model import ThinkerConfig
from tests.unit.thinker_model.thinker_tiny_config import tiny_config, tiny_dict


def test_reads_dims_ids_and_multimodal_fields() -> None:
    cfg = tiny_config()
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (32, 3, 4, 2, 8)
    assert cfg.mrope_section == (2, 1, 1) and cfg.rope_theta == 1e6 and cfg.num_query_groups == 2
    assert (cfg.im_start_token_id, cfg.image_token_id, cfg.audio_end_token_id) == (200, 212, 215)
    assert cfg.user_token_id == 872  # absent from the dict: the real id
    assert (cfg.num_deepstack, cfg.accept_hidden_layer, cfg.spatial_merge_size) == (2, 2, 2)


def test_legacy_rope_scaling_reads_the_same() -> None:
    root = tiny_dict(rope_parameters=None, rope_theta=1e6,
                     rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1], "interleaved": True})
    assert ThinkerConfig.from_dict(root) == tiny_config()


def test_thinker_only_checkpoint_has_no_accept_hidden_layer(tmp_path: Path) -> None:
    root = tiny_dict()
    del root["talker_config"]
    (tmp_path / "config.json").write_text(json.dumps(root))
    assert ThinkerConfig.from_checkpoint(tmp_path).accept_hidden_layer is None


def test_missing_config_json_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json"):
        ThinkerConfig.from_checkpoint(tmp_path)


def test_a_config_without_a_text_model_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {"vision_config": {}}}))
    with pytest.raises(ValueError, match="no thinker_config.text_config; is it a Qwen3-Omni checkpoint"):
        ThinkerConfig.from_checkpoint(tmp_path)


def test_moe_layer_selection() -> None:
    assert [tiny_config().is_moe_layer(i) for i in range(3)] == [True, True, True]
    assert [tiny_config(mlp_only_layers=[1]).is_moe_layer(i) for i in range(3)] == [True, False, True]
    assert [tiny_config(decoder_sparse_step=2).is_moe_layer(i) for i in range(3)] == [False, True, False]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (dict(mrope_section=(2, 2, 1)), "mrope_section"),
        (dict(num_kv_heads=3), "num_kv_heads"),
        (dict(num_experts_per_tok=5), "num_experts_per_tok"),
        (dict(accept_hidden_layer=4), "accept_hidden_layer"),
        (dict(num_deepstack=4), "num_deepstack"),
    ],
)
def test_validation_names_the_field(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(tiny_config(), **overrides)


def test_rejects_unsupported_rope_and_bad_section() -> None:
    with pytest.raises(ValueError, match="rope_type"):
        ThinkerConfig.from_dict(tiny_dict(rope_parameters={"rope_type": "yarn", "mrope_section": [2, 1, 1]}))
    with pytest.raises(ValueError, match="3 entries"):
        ThinkerConfig.from_dict(tiny_dict(rope_parameters={"rope_type": "default", "mrope_section": [4]}))
