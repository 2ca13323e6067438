"""pcm16: float samples to little-endian 16-bit PCM, clamped to [-1, 1], rounded half to even."""
from __future__ import annotations

import numpy as np
import torch

from services.talker.wire import pcm16


def test_pcm16_is_the_clamped_rounded_scale() -> None:
    edges = [1.0, -1.0, 1.5, -7.0, 0.5 / 32767, 1.5 / 32767, -0.5 / 32767, 2.5 / 32767, float("inf"), float("-inf")]
    samples = torch.cat([torch.randn(10_000, generator=torch.Generator().manual_seed(0)), torch.tensor(edges)])
    expected = np.round(np.clip(samples.numpy(), -1.0, 1.0) * np.float32(32767.0)).astype("<i2").tobytes()
    assert pcm16(samples) == expected
    assert pcm16(torch.tensor([1.0, -1.0, 0.0])) == b"\xff\x7f\x01\x80\x00\x00"


def test_pcm16_takes_half_precision_samples() -> None:
    samples = torch.tensor([0.25, -0.75, 3.0], dtype=torch.bfloat16)
    assert pcm16(samples) == pcm16(samples.float())
