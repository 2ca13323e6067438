"""Speech-like test clips for the Transcribe benchmark: 16 kHz mono 16-bit WAV bytes, one distinct clip per index.

A clip alternates voiced stretches (a harmonic series on a drifting pitch, shaped by three formant bumps that move
from syllable to syllable), unvoiced noise bursts (fricatives) and short pauses, so its log-mel frames look like
speech's rather than a steady tone's. Random weights do not care what the sound says; what matters is that the
front end does real work on a plausible signal and that no two requests share bytes (no encoder or prefix-cache hit).
"""
from __future__ import annotations

import io
import os
import wave
from concurrent.futures import ThreadPoolExecutor

import numpy as np

RATE = 16_000
# Syllable-scale segments: voiced 120-320 ms, fricative 40-120 ms, pause 30-150 ms.
VOICED_S = (0.12, 0.32)
FRICATIVE_S = (0.04, 0.12)
PAUSE_S = (0.03, 0.15)
# Formant centres (Hz) a vowel draws from, and their bandwidth as a gaussian width.
FORMANTS = ((300.0, 850.0), (850.0, 2300.0), (2300.0, 3200.0))
FORMANT_WIDTH_HZ = 180.0


def _voiced(n: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(n) / RATE
    f0 = rng.uniform(95.0, 230.0) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(2.0, 5.0) * t))  # intonation
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    formants = [rng.uniform(lo, hi) for lo, hi in FORMANTS]
    out = np.zeros(n)
    base = float(f0.mean())
    for k in range(1, int(3800 // base) + 1):  # harmonics below ~4 kHz, weighted by the formant envelope
        freq = k * base
        gain = sum(np.exp(-0.5 * ((freq - f) / FORMANT_WIDTH_HZ) ** 2) for f in formants) + 0.02
        out += gain / k**0.5 * np.sin(k * phase)
    envelope = np.sin(np.pi * np.arange(n) / n) ** 0.5  # syllable onset and decay, no clicks
    return out * envelope


def _fricative(n: int, rng: np.random.Generator) -> np.ndarray:
    noise = rng.standard_normal(n)
    noise = np.diff(noise, prepend=0.0)  # first difference: tilts the spectrum up, like /s/ or /f/
    return 0.3 * noise * np.hanning(n)


def speech_like(seconds: float, seed: int) -> np.ndarray:
    """float32 samples in [-1, 1], `seconds` long, drawn from `seed`."""
    rng = np.random.default_rng(seed)
    total = int(round(seconds * RATE))
    parts: list[np.ndarray] = []
    filled = 0
    while filled < total:
        kind = rng.choice(3, p=(0.6, 0.25, 0.15))
        lo, hi = (VOICED_S, FRICATIVE_S, PAUSE_S)[kind]
        n = int(rng.uniform(lo, hi) * RATE)
        seg = _voiced(n, rng) if kind == 0 else _fricative(n, rng) if kind == 1 else np.zeros(n)
        parts.append(seg)
        filled += n
    x = np.concatenate(parts)[:total]
    x += 0.003 * rng.standard_normal(total)  # room noise: no stretch is digital silence
    return (0.5 * x / max(1e-6, float(np.abs(x).max()))).astype(np.float32)


def wav_bytes(samples: np.ndarray) -> bytes:
    pcm = np.clip(np.round(samples * 32767), -32768, 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


class ClipBank:
    """WAV bytes by request index, made ahead of a level (`prepare`) so the closed loop's clock never includes
    synthesis; an index not prepared is made on demand. Clip i is the same in every run (seed base + i)."""

    def __init__(self, seconds: float, seed_base: int = 0) -> None:
        self.seconds = seconds
        self.seed_base = seed_base
        self.clips: dict[int, bytes] = {}

    def prepare(self, first: int, count: int) -> None:
        self.clips = {i: self.clips[i] for i in range(first, first + count) if i in self.clips}  # drop old levels
        todo = [i for i in range(first, first + count) if i not in self.clips]
        with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:  # numpy's sin releases the GIL: ~25 ms a clip
            for i, clip in zip(todo, pool.map(self._make, todo)):
                self.clips[i] = clip

    def _make(self, index: int) -> bytes:
        return wav_bytes(speech_like(self.seconds, self.seed_base + index))

    def __getitem__(self, index: int) -> bytes:
        if index not in self.clips:
            self.clips[index] = self._make(index)
        return self.clips[index]
