"""Qwen3-ASR's chunking: a clip shorter than one chunk is convolved as a zero-padded full chunk (no stem masks)."""
from __future__ import annotations

import dataclasses

import pytest

from services.audio.model.config import AudioEncoderConfig
from services.audio.model.plan import plan_batch, plan_bucketed

OMNI = AudioEncoderConfig(d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64,
                          downsample_hidden_size=8, output_dim=64)
ASR = dataclasses.replace(OMNI, pad_short_clips=True)


@pytest.mark.parametrize("plan", [plan_batch, plan_bucketed])
def test_short_clip_masks_only_without_padding(plan) -> None:
    assert plan([60, 250], OMNI).launches[0].masks is not None
    padded = plan([60, 250], ASR)
    assert padded.launches[0].masks is None
    assert padded.token_counts == plan([60, 250], OMNI).token_counts == (8, 33)
