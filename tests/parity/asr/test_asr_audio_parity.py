"""The audio stage on Qwen3-ASR: log-mel + AuT + two-linear projector vs transformers' Qwen3ASRProcessor and
`get_audio_features`, fp32, for whole-chunk, tail-chunk and shorter-than-a-chunk clips, alone and batched."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from runtime.checkpoint.asr.demo import write_original_layout
from services.audio.features import LogMelExtractor, MelConfig
from services.audio.model import AudioEncoder
from tests.parity.audio.audio_reference import RATE, assert_close, clip

# 0.3 s is below the extractor's 0.5 s minimum (zero-padded to 8000 samples first); 0.7 s is one short chunk.
SAMPLES = {"0.3s": 4800, "0.7s": 11200, "1s": 16000, "2.37s": 37920, "9.1s": 145600}
MIN_SAMPLES = 8000


@pytest.fixture(scope="module")
def encoder(asr_ckpt: Path) -> AudioEncoder:
    return AudioEncoder.load(asr_ckpt, "cpu", torch.float32)


@pytest.fixture(scope="module")
def extractor(asr_ckpt: Path) -> LogMelExtractor:
    return LogMelExtractor(MelConfig.from_checkpoint(asr_ckpt))


def reference(asr_ckpt: Path, hf_asr: Any, samples: np.ndarray) -> torch.Tensor:
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(asr_ckpt)
    inputs = proc.apply_transcription_request(samples)
    with torch.no_grad():
        return hf_asr.model.get_audio_features(inputs["input_features"],
                                               inputs["input_features_mask"]).pooler_output


def ours_for(encoder: AudioEncoder, extractor: LogMelExtractor, clips: list[np.ndarray]) -> list[torch.Tensor]:
    padded = [np.pad(c, (0, max(0, MIN_SAMPLES - c.shape[0]))) for c in clips]  # the gateway's job for Qwen3-ASR
    return encoder(extractor([torch.from_numpy(c) for c in padded]))


def test_config_pads_short_clips(encoder: AudioEncoder) -> None:
    cfg = encoder.config
    assert cfg.pad_short_clips and (cfg.d_model, cfg.output_dim, cfg.encoder_layers) == (32, 64, 2)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_clip_matches_transformers(name: str, asr_ckpt: Path, hf_asr: Any, encoder: AudioEncoder,
                                   extractor: LogMelExtractor) -> None:
    samples = clip(SAMPLES[name])
    (ours,) = ours_for(encoder, extractor, [samples])
    assert_close(ours, reference(asr_ckpt, hf_asr, samples))


def test_mixed_batch_matches_each_clip_alone(asr_ckpt: Path, hf_asr: Any, encoder: AudioEncoder,
                                             extractor: LogMelExtractor) -> None:
    clips = [clip(n, seed=i) for i, n in enumerate(SAMPLES.values())]
    for samples, out in zip(clips, ours_for(encoder, extractor, clips)):
        assert_close(out, reference(asr_ckpt, hf_asr, samples))


def test_original_layout_loads_the_same_encoder(tmp_path: Path, asr_ckpt: Path, encoder: AudioEncoder) -> None:
    original = AudioEncoder.load(write_original_layout(asr_ckpt, tmp_path / "orig"), "cpu", torch.float32)
    assert original.config == encoder.config
    for (name, ours), (_, theirs) in zip(encoder.state_dict().items(), original.state_dict().items()):
        assert torch.equal(ours, theirs), name
