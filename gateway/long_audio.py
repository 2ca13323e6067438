"""Audio longer than Qwen3-ASR takes in one prompt (20 minutes, the reference package's MAX_ASR_INPUT_SECONDS) is
cut into windows, each cut at the quietest 100 ms in the window's last seconds, so words are rarely split."""
from __future__ import annotations

import numpy as np

from gateway.media.audio import header_seconds  # noqa: F401 - where the transcription path takes it from
from gateway.media.wav import wav_file

RATE = 16_000
MAX_WINDOW_S = 1200.0
QUIET_FRAME_S = 0.1
SEARCH_S = 10.0  # how far back from a window's end a cut may move to find a quiet point


def cut_points(samples: np.ndarray, window_s: float = MAX_WINDOW_S, search_s: float = SEARCH_S) -> list[int]:
    """Sample indices where the pieces start, 0 first; every piece at most `window_s` long."""
    window, frame = int(window_s * RATE), int(QUIET_FRAME_S * RATE)
    search = min(int(search_s * RATE), window // 2) // frame * frame
    starts = [0]
    while samples.shape[0] - starts[-1] > window:
        end = starts[-1] + window
        region = samples[end - search:end].reshape(-1, frame)  # [frames, frame]
        energy = np.square(region, dtype=np.float64).mean(axis=1)
        quietest = energy.shape[0] - 1 - int(np.argmin(energy[::-1]))  # of equally quiet frames, the latest
        starts.append(end - search + quietest * frame + frame // 2)
    return starts


def pieces(samples: np.ndarray, window_s: float = MAX_WINDOW_S) -> list[np.ndarray]:
    starts = cut_points(samples, window_s)
    return [samples[a:b] for a, b in zip(starts, [*starts[1:], samples.shape[0]])]


def wav_bytes(samples: np.ndarray) -> bytes:
    """16 kHz float32 mono as a WAV file (lossless: the piece decodes to the same samples)."""
    return wav_file(samples.astype(np.float32, copy=False), RATE)
