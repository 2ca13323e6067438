"""Our on-device log-mel equals transformers' WhisperFeatureExtractor, per clip and for a mixed batch."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.audio.features import LogMelExtractor, MelConfig
from tests.parity.audio.audio_reference import (
    CLIP_SECONDS,
    MIXED_SAMPLES,
    RATE,
    assert_close,
    clip,
    hf_log_mel,
)


@pytest.fixture(scope="module")
def extractor(demo_ckpt: Path) -> LogMelExtractor:
    return LogMelExtractor(MelConfig.from_checkpoint(demo_ckpt))


@pytest.mark.parametrize("name", list(CLIP_SECONDS))
def test_log_mel_equals_whisper_extractor(name: str, demo_ckpt: Path, extractor: LogMelExtractor) -> None:
    samples = clip(int(CLIP_SECONDS[name] * RATE))
    (ours,) = extractor([torch.from_numpy(samples)])
    assert ours.shape == (128, samples.shape[0] // 160)
    assert_close(ours, hf_log_mel(demo_ckpt, samples))


def test_mixed_batch_equals_each_clip_alone(demo_ckpt: Path, extractor: LogMelExtractor) -> None:
    clips = [clip(n, seed=i) for i, n in enumerate(MIXED_SAMPLES)]
    ours = extractor([torch.from_numpy(c) for c in clips])
    for samples, mel in zip(clips, ours):
        assert_close(mel, hf_log_mel(demo_ckpt, samples))


def test_quiet_clip_uses_its_own_peak(demo_ckpt: Path, extractor: LogMelExtractor) -> None:
    """The -8 floor is per clip: a quiet clip batched with a loud one keeps its own dynamic range."""
    loud, quiet = clip(16000), clip(8000, seed=3) * 1e-3
    ours = extractor([torch.from_numpy(loud), torch.from_numpy(quiet)])
    assert_close(ours[1], hf_log_mel(demo_ckpt, quiet))


def test_packed_is_the_concatenation(extractor: LogMelExtractor) -> None:
    clips = [torch.from_numpy(clip(n)) for n in (4000, 16000)]
    torch.testing.assert_close(extractor.packed(clips), torch.cat(extractor(clips), dim=1), rtol=0, atol=0)


def test_too_short_clip_raises(extractor: LogMelExtractor) -> None:
    with pytest.raises(ValueError, match="at least 201"):
        extractor([torch.zeros(180)])
