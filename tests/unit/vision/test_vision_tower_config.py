"""VisionTowerConfig: reading config.json's vision section and validation errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.vision.model.config import VisionTowerConfig


def test_from_checkpoint_reads_the_vision_section(tmp_path: Path) -> None:
    vision = {"depth": 4, "hidden_size": 32, "num_heads": 2, "out_hidden_size": 64, "num_position_embeddings": 64,
              "deepstack_visual_indexes": [0, 1, 2], "intermediate_size": 64}
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {"vision_config": vision}}))
    cfg = VisionTowerConfig.from_checkpoint(tmp_path)
    assert (cfg.depth, cfg.hidden_size, cfg.head_dim, cfg.out_hidden_size) == (4, 32, 16, 64)
    assert cfg.deepstack_visual_indexes == (0, 1, 2) and cfg.position_grid_side == 8
    assert cfg.patch_dim == 1536 and cfg.merged_dim == 128 and cfg.rope_theta == 10000.0


def test_absent_keys_take_reference_defaults() -> None:
    cfg = VisionTowerConfig.from_dict({})
    assert (cfg.depth, cfg.hidden_size, cfg.num_heads, cfg.out_hidden_size) == (27, 1152, 16, 3584)
    assert cfg.deepstack_visual_indexes == (8, 16, 24) and cfg.head_dim == 72


def test_rope_theta_from_rope_parameters() -> None:
    assert VisionTowerConfig.from_dict({"rope_parameters": {"rope_theta": 500.0}}).rope_theta == 500.0
    assert VisionTowerConfig.from_dict({"rope_theta": 250.0}).rope_theta == 250.0


def test_missing_vision_section(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {}}))
    with pytest.raises(ValueError, match="vision_config"):
        VisionTowerConfig.from_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"hidden_size": 30, "num_heads": 4}, "not divisible"),
        ({"hidden_size": 24, "num_heads": 4}, "multiple of 4"),
        ({"num_position_embeddings": 50}, "perfect square"),
        ({"depth": 4, "deepstack_visual_indexes": (1, 4)}, "outside"),
        ({"hidden_act": "relu"}, "hidden_act"),
    ],
)
def test_validation(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        VisionTowerConfig(**kwargs)
