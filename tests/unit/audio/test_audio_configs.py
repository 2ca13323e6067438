"""MelConfig and AudioEncoderConfig: read from the checkpoint, and every bad value names its field and the fix."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.audio.features import MelConfig
from services.audio.model.config import AudioEncoderConfig


def test_mel_config_from_demo_checkpoint(demo_ckpt: Path) -> None:
    cfg = MelConfig.from_checkpoint(demo_ckpt)
    assert (cfg.feature_size, cfg.sampling_rate, cfg.hop_length, cfg.n_fft, cfg.dither) == (128, 16000, 160, 400, 0.0)
    assert cfg.num_frames(16159) == 100


def test_mel_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="preprocessor_config.json"):
        MelConfig.from_checkpoint(tmp_path)


@pytest.mark.parametrize("raw,field", [
    ({"dither": 1e-4}, "dither"),
    ({"feature_extractor_type": "SeamlessM4TFeatureExtractor"}, "feature_extractor_type"),
    ({"n_fft": 401}, "n_fft"),
    ({"hop_length": 0}, "hop_length"),
    ({"feature_size": 0}, "feature_size"),
    ({"sampling_rate": -1}, "sampling_rate"),
])
def test_mel_config_rejects_bad_values(raw: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"MelConfig.{field}="):
        MelConfig.from_dict(raw)


def test_encoder_config_from_demo_checkpoint(demo_ckpt: Path) -> None:
    cfg = AudioEncoderConfig.from_checkpoint(demo_ckpt)
    raw = json.loads((demo_ckpt / "config.json").read_text())["thinker_config"]["audio_config"]
    assert cfg.d_model == raw["d_model"] and cfg.output_dim == raw["output_dim"]
    assert (cfg.chunk_frames, cfg.chunk_tokens, cfg.window_tokens) == (100, 13, 104)


def test_real_dims() -> None:
    cfg = AudioEncoderConfig()
    assert (cfg.head_dim, cfg.stem_features, cfg.window_tokens) == (64, 7680, 104)


def test_encoder_config_needs_audio_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {}}))
    with pytest.raises(ValueError, match="audio_config"):
        AudioEncoderConfig.from_checkpoint(tmp_path)


@pytest.mark.parametrize("raw,field", [
    ({"encoder_attention_heads": 3}, "encoder_attention_heads"),
    ({"n_window_infer": 150}, "n_window_infer"),
    ({"activation_function": "relu"}, "activation_function"),
    ({"max_source_positions": 5}, "max_source_positions"),
    ({"encoder_layers": 0}, "encoder_layers"),
])
def test_encoder_config_rejects_bad_values(raw: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"AudioEncoderConfig.{field}="):
        AudioEncoderConfig.from_dict(raw)
