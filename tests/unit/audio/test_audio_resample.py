"""The gateway's resampling (soxr HQ): librosa's output length, the signal's timing kept, band-limited."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gateway.media.audio import resample

RATES = [(44100, 16000), (48000, 16000), (22050, 16000), (8000, 16000), (11025, 16000), (32000, 16000), (24000, 16000)]


@pytest.mark.parametrize("rate_in,rate_out", RATES)
@pytest.mark.parametrize("length", [1, 7, 4801, 44100])
def test_length_is_ceil_of_the_ratio_in_the_input_dtype(rate_in: int, rate_out: int, length: int) -> None:
    # soxr alone gives one sample short for some (e.g. 4801 at 48 kHz -> 1600); librosa pads to the ceiling
    for dtype in (np.float32, np.float64):
        x = np.random.default_rng(length).standard_normal(length).astype(dtype)
        y = resample(x, rate_in, rate_out)
        assert y.shape == (-(-length * rate_out // rate_in),) and y.dtype == dtype


@pytest.mark.parametrize("rate_in", [44100, 48000, 22050, 8000])
def test_a_tone_keeps_its_amplitude_and_timing(rate_in: int) -> None:
    """Output m sits at input time m * rate_in / rate_out: no delay, no gain (away from the edges)."""
    t_in = np.arange(rate_in) / rate_in
    y = resample(np.sin(2 * np.pi * 1000 * t_in + 0.3), rate_in, 16000)
    expected = np.sin(2 * np.pi * 1000 * np.arange(y.shape[0]) / 16000 + 0.3)
    np.testing.assert_allclose(y[800:-800], expected[800:-800], rtol=0, atol=2e-3)


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
