"""Transformers side of the audio parity tests: clips, the Whisper extractor as the Omni processor calls it, the AuT."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

RATE = 16000
# 0.3 s, 1 s, 7.9 s and 30 s from the issue, plus lengths that end mid-hop and mid-chunk.
CLIP_SECONDS = {"0.3s": 0.3, "1s": 1.0, "7.9s": 7.9, "30s": 30.0}
MIXED_SAMPLES = [4800, 16000 + 77, 126400, 480000, 9130, 33333]


def clip(num_samples: int, seed: int = 0) -> np.ndarray:
    """Speech-like test signal: a few drifting tones over noise, float32 in [-1, 1]."""
    rng = np.random.default_rng(seed + num_samples)
    t = np.arange(num_samples) / RATE
    tones = sum(0.2 * np.sin(2 * np.pi * f * t * (1 + 0.05 * np.sin(t))) for f in (180.0, 440.0, 1300.0))
    return (tones + 0.05 * rng.standard_normal(num_samples)).astype(np.float32)


def hf_log_mel(demo_ckpt: Path, samples: np.ndarray) -> torch.Tensor:
    """[128, T] for one clip, exactly as Qwen3OmniMoeProcessor._process_audio calls WhisperFeatureExtractor."""
    out = _whisper_extractor(demo_ckpt)(
        samples, sampling_rate=RATE, padding=True, truncation=False, return_attention_mask=True, return_tensors="pt"
    )
    frames = int(out["attention_mask"].sum())
    assert out["input_features"].shape[-1] == frames
    return out["input_features"][0]


@lru_cache(maxsize=2)
def _whisper_extractor(demo_ckpt: Path) -> Any:
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor.from_pretrained(demo_ckpt)


def hf_audio_features(hf_omni: Any, mels: list[torch.Tensor]) -> torch.Tensor:
    """Packed AuT output of `get_audio_features` for clips batched the way the processor pads them."""
    longest = max(m.shape[1] for m in mels)
    features = torch.zeros(len(mels), mels[0].shape[0], longest)
    mask = torch.zeros(len(mels), longest, dtype=torch.int32)
    for i, mel in enumerate(mels):
        features[i, :, :mel.shape[1]] = mel
        mask[i, :mel.shape[1]] = 1
    with torch.no_grad():
        return hf_omni.thinker.get_audio_features(features, feature_attention_mask=mask).pooler_output


def assert_close(ours: torch.Tensor, ref: torch.Tensor, rel: float = 1e-5) -> None:
    """Within `rel` of the reference's scale: fp32 parity."""
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    scale = ref.abs().max().item()
    err = (ours - ref).abs().max().item()
    assert err <= rel * max(scale, 1e-6), f"max abs err {err:.3g} vs scale {scale:.3g}"
