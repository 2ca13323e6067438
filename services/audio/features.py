"""Whisper-compatible log-mel on device: a list of 16 kHz clips in, one [mel_bins, frames] tensor per clip out."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from runtime.audio_lengths import mel_frame_count
from runtime.transfer import to_device
from services.audio.mel_filters import mel_filter_bank

PREPROCESSOR_FILE = "preprocessor_config.json"
# Qwen3-ASR's extractor makes Whisper's log-mel for one clip alone (its zero-padding to whole chunks and to
# `min_length` samples is done before: the gateway pads short clips, the encoder pads chunks).
FEATURE_EXTRACTORS = ("WhisperFeatureExtractor", "Qwen3ASRFeatureExtractor")
LOG_FLOOR = 1e-10  # mel power floor before log10
DYNAMIC_RANGE = 8.0  # log10 units kept below each clip's peak (80 dB)


@dataclass(frozen=True)
class MelConfig:
    """Feature-extractor settings as the checkpoint's `preprocessor_config.json` ships them (Whisper field names)."""

    feature_size: int = 128  # mel bins
    sampling_rate: int = 16000
    hop_length: int = 160
    n_fft: int = 400
    dither: float = 0.0

    def __post_init__(self) -> None:
        _check(self.feature_size > 0, "feature_size", self.feature_size, "use a positive number of mel bins")
        _check(self.sampling_rate > 0, "sampling_rate", self.sampling_rate, "use the checkpoint's rate, 16000")
        _check(0 < self.hop_length <= self.n_fft, "hop_length", self.hop_length, f"use 1..n_fft ({self.n_fft})")
        _check(self.n_fft >= 2 and self.n_fft % 2 == 0, "n_fft", self.n_fft, "use an even FFT size, e.g. 400")
        _check(self.dither == 0.0, "dither", self.dither,
               "only 0.0 is supported: dithering makes features random and breaks parity and prefix caching")

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MelConfig:
        kind = raw.get("feature_extractor_type", "WhisperFeatureExtractor")
        _check(kind in FEATURE_EXTRACTORS, "feature_extractor_type", kind,
               "the AuT front end is Whisper's log-mel; use a Qwen3-Omni or Qwen3-ASR preprocessor_config.json")
        names = ("feature_size", "sampling_rate", "hop_length", "n_fft", "dither")
        return cls(**{name: raw[name] for name in names if name in raw})

    @classmethod
    def from_checkpoint(cls, ckpt_dir: Path | str) -> MelConfig:
        path = Path(ckpt_dir) / PREPROCESSOR_FILE
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing; a Qwen3-Omni checkpoint ships it with the Whisper settings")
        return cls.from_dict(json.loads(path.read_text()))

    def num_frames(self, num_samples: int) -> int:
        return mel_frame_count(num_samples, self.hop_length)

    @property
    def min_samples(self) -> int:
        """Shortest clip the front end takes: one frame, and longer than the reflect padding of half a window."""
        return max(self.hop_length, self.n_fft // 2 + 1)


class LogMelExtractor:
    """Log-mel exactly as `WhisperFeatureExtractor` makes it for one clip processed alone (as the Omni processor does
    for a request with one audio): centred STFT with reflect padding, power, mel, log10, per-clip peak - 8 floor,
    (x + 4) / 4, the trailing frame dropped. Many clips run in one STFT with no host sync.
    """

    def __init__(self, config: MelConfig, device: torch.device | str = "cpu") -> None:
        self.config = config
        self.device = torch.device(device)
        self.window = torch.hann_window(config.n_fft, device=self.device)
        filters = mel_filter_bank(config.feature_size, config.n_fft, config.sampling_rate)  # [F, M] float64
        self.filters = torch.from_numpy(filters.T.copy()).to(self.device, torch.float32)  # [M, F]

    def __call__(self, waveforms: list[torch.Tensor]) -> list[torch.Tensor]:
        """One float32 [mel_bins, num_samples // hop] tensor per clip, on `device` (views of one packed tensor)."""
        packed = self.packed(waveforms)
        return list(packed.split([self.config.num_frames(w.shape[-1]) for w in waveforms], dim=1))

    def packed(self, waveforms: list[torch.Tensor]) -> torch.Tensor:
        """The clips' log-mels concatenated along time: [mel_bins, sum of frames], float32 on `device`."""
        cfg = self.config
        if not waveforms:
            return torch.empty(cfg.feature_size, 0, device=self.device)
        layout = _frame_layout([w.shape[-1] for w in waveforms], cfg)
        half = cfg.n_fft // 2
        pieces: list[torch.Tensor] = []
        for wave, gap in zip(waveforms, layout.gaps):
            wave = wave.reshape(1, 1, -1).to(torch.float32)
            pieces.append(F.pad(wave, (half, half), mode="reflect").reshape(-1))  # what stft(center=True) does
            pieces.append(wave.new_zeros(gap))  # keeps the next clip's frames on the hop grid
        buffer = to_device(torch.cat(pieces), self.device)
        spec = torch.stft(buffer, cfg.n_fft, cfg.hop_length, window=self.window, center=False, return_complex=True)
        frame_index = to_device(layout.frame_index, self.device)
        power = spec.index_select(1, frame_index).abs() ** 2  # [F, sum T]
        log_mel = torch.clamp(self.filters @ power, min=LOG_FLOOR).log10()  # [M, sum T]
        clip_id = to_device(layout.clip_id, self.device)
        peak = torch.full((len(waveforms),), float("-inf"), device=self.device)
        peak = peak.scatter_reduce(0, clip_id, log_mel.amax(dim=0), "amax")  # [clips]
        log_mel = torch.maximum(log_mel, (peak - DYNAMIC_RANGE).index_select(0, clip_id)[None, :])
        return (log_mel + 4.0) / 4.0


@dataclass(frozen=True)
class _FrameLayout:
    gaps: list[int]  # zeros after each reflect-padded clip in the STFT buffer
    frame_index: torch.Tensor  # int64 [sum T]: STFT frame of each output frame
    clip_id: torch.Tensor  # int64 [sum T]: clip of each output frame


def _frame_layout(num_samples: list[int], cfg: MelConfig) -> _FrameLayout:
    """Host-side placement of the clips in one buffer so every clip starts on a frame boundary."""
    gaps: list[int] = []
    frame_index: list[torch.Tensor] = []
    clip_id: list[torch.Tensor] = []
    start_frame = 0
    for clip, n in enumerate(num_samples):
        if n < cfg.min_samples:
            raise ValueError(f"clip {clip} has {n} samples; the front end needs at least {cfg.min_samples}")
        frames = cfg.num_frames(n)
        padded = n + 2 * (cfg.n_fft // 2)
        slots = -(-padded // cfg.hop_length)  # frames this clip occupies, rounded up to the hop grid
        gaps.append(slots * cfg.hop_length - padded)
        frame_index.append(torch.arange(start_frame, start_frame + frames))
        clip_id.append(torch.full((frames,), clip, dtype=torch.int64))
        start_frame += slots
    # torch.stft(center=False) needs at least n_fft samples; the last clip's slots always provide them.
    return _FrameLayout(gaps, torch.cat(frame_index), torch.cat(clip_id))


def _check(ok: bool, field: str, value: object, fix: str) -> None:
    if not ok:
        raise ValueError(f"MelConfig.{field}={value!r} is invalid: {fix}")
