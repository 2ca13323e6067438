"""A tiny Thinker config dict for unit tests (no checkpoint, no transformers)."""
from __future__ import annotations

import copy
from typing import Any

from services.thinker.model import ThinkerConfig

TINY: dict[str, Any] = {
    "im_start_token_id": 200, "im_end_token_id": 201,
    "thinker_config": {
        "image_token_id": 212, "video_token_id": 213, "audio_token_id": 216, "vision_start_token_id": 210,
        "vision_end_token_id": 211, "audio_start_token_id": 214, "audio_end_token_id": 215,
        "position_id_per_seconds": 13,
        "vision_config": {"spatial_merge_size": 2, "deepstack_visual_indexes": [0, 1]},
        "audio_config": {"n_window": 50},
        "text_config": {
            "vocab_size": 256, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "moe_intermediate_size": 16,
            "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 1, 1]},
        },
    },
    "talker_config": {"accept_hidden_layer": 2},
}


def tiny_dict(**text_overrides: Any) -> dict[str, Any]:
    root = copy.deepcopy(TINY)
    root["thinker_config"]["text_config"].update(text_overrides)
    return root


def tiny_config(**text_overrides: Any) -> ThinkerConfig:
    return ThinkerConfig.from_dict(tiny_dict(**text_overrides))
