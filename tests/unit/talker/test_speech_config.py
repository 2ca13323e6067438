"""SpeechConfig: the model's defaults, hung on every stage as `speech`, and errors naming field, value and fix."""
from __future__ import annotations

import pytest

from runtime.config import MeshConfig, SpeechConfig, load_mesh_config
from services.talker.model.sampling import TalkerSampling


def test_defaults_are_the_models() -> None:
    cfg, model = SpeechConfig(), TalkerSampling()
    assert (cfg.first_chunk_frames, cfg.chunk_frames, cfg.left_context_frames) == (4, 25, 11)
    assert (cfg.max_frames, cfg.max_rows) == (4095, 32)
    assert (cfg.temperature, cfg.top_k, cfg.top_p, cfg.repetition_penalty) == (
        model.temperature, model.top_k, model.top_p, model.repetition_penalty)
    assert (cfg.predictor_temperature, cfg.predictor_top_k, cfg.predictor_top_p) == (
        model.predictor_temperature, model.predictor_top_k, model.predictor_top_p)
    assert MeshConfig().talker.speech == cfg


@pytest.mark.parametrize(("field", "value", "fix"), [
    ("max_rows", 0, ">= 1"), ("max_frames", 0, ">= 1"), ("max_prompt_tokens", 0, ">= 1"),
    ("max_prefill_tokens", 0, ">= 1"),
    ("first_chunk_frames", 0, ">= 1"), ("chunk_frames", -1, ">= 1"), ("left_context_frames", 0, ">= 1"),
    ("decodes_in_flight", 0, ">= 1"),
    ("temperature", -0.1, "0 is greedy"), ("predictor_temperature", -1.0, "0 is greedy"),
    ("top_k", -1, "0 disables"), ("predictor_top_k", -5, "0 disables"), ("top_p", 0.0, "(0, 1]"),
    ("predictor_top_p", 1.5, "(0, 1]"), ("repetition_penalty", 0.0, "> 0"),
])
def test_bad_values_name_field_value_and_fix(field: str, value: float, fix: str) -> None:
    with pytest.raises(ValueError) as caught:
        SpeechConfig(**{field: value})
    assert f"{field}={value!r}" in str(caught.value) and fix in str(caught.value)


def test_the_yaml_path_names_the_talker_section() -> None:
    cfg = load_mesh_config(overrides={"talker.speech.chunk_frames": 10})
    assert cfg.talker.speech.chunk_frames == 10
    with pytest.raises(ValueError, match=r"talker\.speech\.first_chunk_frames=0"):
        load_mesh_config(overrides={"talker.speech.first_chunk_frames": 0})
