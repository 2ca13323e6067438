"""The gateway's polyphase resampler equals scipy.signal.resample_poly (same Kaiser filter) and is band-limited."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gateway.media.audio import resample

signal = pytest.importorskip("scipy.signal")

RATES = [(44100, 16000), (48000, 16000), (22050, 16000), (8000, 16000), (11025, 16000), (32000, 16000), (24000, 16000)]


@pytest.mark.parametrize("rate_in,rate_out", RATES)
@pytest.mark.parametrize("length", [1, 7, 4801, 44100])
def test_equals_scipy_resample_poly(rate_in: int, rate_out: int, length: int) -> None:
    x = np.random.default_rng(length).standard_normal(length)
    g = math.gcd(rate_in, rate_out)
    ours = resample(x, rate_in, rate_out)
    ref = signal.resample_poly(x, rate_out // g, rate_in // g)
    assert ours.shape == ref.shape == (-(-length * rate_out // rate_in),)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
    ours32 = resample(x.astype(np.float32), rate_in, rate_out)
    assert ours32.dtype == np.float32
    np.testing.assert_allclose(ours32, ref, rtol=0, atol=2e-5)


def test_small_blocks_give_the_same_result() -> None:
    x = np.random.default_rng(0).standard_normal(10_000)
    np.testing.assert_allclose(resample(x, 44100, 16000, block=7), resample(x, 44100, 16000), rtol=0, atol=1e-12)


def test_same_rate_is_a_copy() -> None:
    x = np.arange(10, dtype=np.float32)
    y = resample(x, 16000, 16000)
    np.testing.assert_array_equal(x, y)
    assert y is not x


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x[1000:-1000] ** 2)))


def test_passband_kept_and_above_nyquist_removed() -> None:
    t = np.arange(48000) / 48000
    kept = resample(np.sin(2 * np.pi * 3000 * t), 48000, 16000)
    aliased = resample(np.sin(2 * np.pi * 12000 * t), 48000, 16000)  # would fold to 4 kHz without the low-pass
    assert abs(rms(kept) - math.sqrt(0.5)) < 1e-3
    assert rms(aliased) < 1e-3 * math.sqrt(0.5)
