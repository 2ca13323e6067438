"""Talker config parsing: both rope formats, voices, and errors that say what to fix."""
from __future__ import annotations

import copy

import pytest

from runtime.checkpoint.demo_config import demo_config
from runtime.errors import InvalidArgument
from services.talker.model.config import parse_talker_config


def test_parses_the_demo_config_in_legacy_rope_form() -> None:
    cfg = parse_talker_config(demo_config())
    assert cfg.lm.mrope_section == (4, 2, 2) and cfg.lm.rope_theta == 1e6
    assert cfg.code2wav.rope_theta == 1e4 and cfg.code2wav.samples_per_frame == 1920
    assert cfg.num_code_groups == 16 and cfg.accept_hidden_layer == 2
    assert cfg.tokens.codec_eos == 2150 and cfg.speakers == {"chelsie": 2301, "ethan": 2302, "aiden": 2303}


def test_parses_transformers5_rope_parameters() -> None:
    raw = demo_config()
    text = raw["talker_config"]["text_config"]
    text.pop("rope_scaling"), text.pop("rope_theta")
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [2, 4, 2]}
    cfg = parse_talker_config(raw)
    assert cfg.lm.rope_theta == 5e5 and cfg.lm.mrope_section == (2, 4, 2)


def test_voice_lookup_is_case_insensitive_and_unknown_voices_list_the_known() -> None:
    cfg = parse_talker_config(demo_config())
    assert cfg.speaker_codec_id("Chelsie") == 2301
    with pytest.raises(InvalidArgument, match="aiden, chelsie, ethan") as err:
        cfg.speaker_codec_id("bob")
    assert err.value.violations[0].field == "voice"


def test_bad_mrope_section_names_the_fix() -> None:
    raw = copy.deepcopy(demo_config())
    raw["talker_config"]["text_config"]["rope_scaling"]["mrope_section"] = [4, 4, 4]
    with pytest.raises(ValueError, match="head_dim/2 = 8"):
        parse_talker_config(raw)


def test_checkpoint_without_talker_is_rejected() -> None:
    raw = demo_config()
    del raw["talker_config"]
    with pytest.raises(ValueError, match="cannot speak"):
        parse_talker_config(raw)


def test_code_group_mismatch_is_rejected() -> None:
    raw = demo_config()
    raw["code2wav_config"]["num_quantizers"] = 8
    with pytest.raises(ValueError, match="num_quantizers=8"):
        parse_talker_config(raw)
