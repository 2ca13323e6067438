"""Qwen3-ASR's short-clip rule at the gateway: a clip under `min_samples` is zero-padded to it before counting."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from gateway.build import audio_min_samples
from gateway.media.audio import decode_audio
from runtime.audio_lengths import audio_token_count
from runtime.checkpoint.asr.demo_config import preprocessor_config


def wav(seconds: float) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.full(int(16000 * seconds), 0.25, dtype=np.float32), 16000, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def test_short_clip_is_padded_with_zeros() -> None:
    plain, padded = decode_audio(wav(0.3), "audio"), decode_audio(wav(0.3), "audio", min_samples=8000)
    assert plain.samples.shape[0] == 4800 and padded.samples.shape[0] == 8000
    assert np.all(padded.samples[4800:] == 0) and np.array_equal(padded.samples[:4800], plain.samples)
    assert (padded.num_mel_frames, padded.token_count) == (50, audio_token_count(50))
    assert padded.content_hash != plain.content_hash


def test_long_clip_is_untouched() -> None:
    assert decode_audio(wav(0.6), "audio", min_samples=8000).samples.shape[0] == 9600


def test_min_samples_comes_from_the_asr_preprocessor(tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor_config()))
    assert audio_min_samples(tmp_path) == 8000
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"feature_extractor_type": "WhisperFeatureExtractor"}))
    assert audio_min_samples(tmp_path) == 0
