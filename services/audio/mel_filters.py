"""Slaney-style mel filter bank (the one Whisper's log-mel uses), built in float64 numpy from the scale's definition."""
from __future__ import annotations

import math

import numpy as np

# The Slaney mel scale is linear below 1 kHz (3 mels per 200 Hz) and logarithmic above, 27 mels per factor 6.4.
_LINEAR_HZ_PER_MEL = 200.0 / 3.0
_BREAK_HZ = 1000.0
_BREAK_MEL = _BREAK_HZ / _LINEAR_HZ_PER_MEL  # 15
_LOG_STEP = math.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / _LINEAR_HZ_PER_MEL
    logarithmic = _BREAK_MEL + np.log(np.maximum(hz, _BREAK_HZ) / _BREAK_HZ) / _LOG_STEP
    return np.where(hz >= _BREAK_HZ, logarithmic, linear)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * _LINEAR_HZ_PER_MEL
    logarithmic = _BREAK_HZ * np.exp(_LOG_STEP * (np.maximum(mel, _BREAK_MEL) - _BREAK_MEL))
    return np.where(mel >= _BREAK_MEL, logarithmic, linear)


def mel_filter_bank(
    num_mel_bins: int, n_fft: int, sampling_rate: int, f_min: float = 0.0, f_max: float | None = None
) -> np.ndarray:
    """[n_fft // 2 + 1, num_mel_bins] float64: triangles evenly spaced in mel, each scaled to unit area in Hz."""
    f_max = sampling_rate / 2 if f_max is None else f_max
    fft_hz = np.linspace(0.0, sampling_rate // 2, n_fft // 2 + 1)  # [F]
    edges_hz = mel_to_hz(np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), num_mel_bins + 2))  # [M + 2]
    widths = np.diff(edges_hz)  # [M + 1]
    offsets = edges_hz[None, :] - fft_hz[:, None]  # [F, M + 2]: edge minus bin frequency
    rising = -offsets[:, :-2] / widths[:-1]  # [F, M]: 0 at the left edge, 1 at the centre
    falling = offsets[:, 2:] / widths[1:]  # [F, M]: 1 at the centre, 0 at the right edge
    triangles = np.maximum(0.0, np.minimum(rising, falling))
    # Slaney normalisation: divide by half the triangle's base so each filter has the same area.
    return triangles * (2.0 / (edges_hz[2:] - edges_hz[:-2]))[None, :]
