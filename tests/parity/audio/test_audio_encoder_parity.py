"""AuT parity with transformers on the demo checkpoint: samples -> log-mel -> encoder vs WhisperFeatureExtractor ->
`thinker.get_audio_features`, fp32, for 0.3 s, 1 s, 7.9 s, 30 s clips and mixed batches."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from services.audio.features import LogMelExtractor, MelConfig
from runtime.audio_lengths import audio_token_count
from services.audio.model import AudioEncoder
from tests.parity.audio.audio_reference import (
    CLIP_SECONDS,
    MIXED_SAMPLES,
    RATE,
    assert_close,
    clip,
    hf_audio_features,
    hf_log_mel,
)


@pytest.fixture(scope="module")
def encoder(demo_ckpt: Path) -> AudioEncoder:
    return AudioEncoder.load(demo_ckpt, "cpu", torch.float32)


@pytest.fixture(scope="module")
def extractor(demo_ckpt: Path) -> LogMelExtractor:
    return LogMelExtractor(MelConfig.from_checkpoint(demo_ckpt))


@pytest.mark.parametrize("name", list(CLIP_SECONDS))
def test_clip_matches_transformers(name: str, demo_ckpt: Path, hf_omni: Any, encoder: AudioEncoder,
                                   extractor: LogMelExtractor) -> None:
    samples = clip(int(CLIP_SECONDS[name] * RATE))
    (ours,) = encoder(extractor([torch.from_numpy(samples)]))
    ref = hf_audio_features(hf_omni, [hf_log_mel(demo_ckpt, samples)])
    assert ours.shape == (audio_token_count(samples.shape[0] // 160), encoder.config.output_dim)
    assert_close(ours, ref)


def test_mixed_batch_matches_each_clip_alone(demo_ckpt: Path, hf_omni: Any, encoder: AudioEncoder,
                                             extractor: LogMelExtractor) -> None:
    clips = [clip(n, seed=i) for i, n in enumerate(MIXED_SAMPLES)]
    ours = encoder(extractor([torch.from_numpy(c) for c in clips]))
    for samples, out in zip(clips, ours):
        assert_close(out, hf_audio_features(hf_omni, [hf_log_mel(demo_ckpt, samples)]))


def test_batch_of_long_clips_matches_transformers_batched(hf_omni: Any, encoder: AudioEncoder) -> None:
    """Where transformers' batch padding agrees with ours (every clip >= 1 s) its batched call matches too."""
    torch.manual_seed(0)
    mels = [torch.randn(128, t) for t in (3000, 790, 101, 1234, 200)]
    assert_close(torch.cat(encoder(mels)), hf_audio_features(hf_omni, mels))


def test_batch_of_short_clips_matches_transformers_alone(hf_omni: Any, encoder: AudioEncoder) -> None:
    """Clips under 1 s are convolved at their own length whatever they are batched with (transformers would pad
    them to the batch's longest chunk); each equals transformers run on that clip alone."""
    torch.manual_seed(1)
    mels = [torch.randn(128, t) for t in (30, 2000, 57, 7, 99)]
    for mel, out in zip(mels, encoder(mels)):
        assert_close(out, hf_audio_features(hf_omni, [mel]))
