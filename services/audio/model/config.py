"""AuT encoder dimensions, read from the checkpoint's `config.json` (Qwen3-Omni's `thinker_config.audio_config`,
Qwen3-ASR's `audio_config` or its original layout's `thinker_config.audio_config`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.audio_lengths import stem_output_length
from runtime.checkpoint.family import family_of

ACTIVATIONS = ("gelu", "gelu_pytorch_tanh", "gelu_new")


@dataclass(frozen=True)
class AudioEncoderConfig:
    num_mel_bins: int = 128
    d_model: int = 1280
    encoder_layers: int = 32
    encoder_attention_heads: int = 20
    encoder_ffn_dim: int = 5120
    downsample_hidden_size: int = 480  # conv stem channels
    output_dim: int = 2048  # thinker hidden size
    n_window: int = 50  # half a conv-stem chunk, in mel frames
    n_window_infer: int = 800  # attention window, in mel frames
    max_source_positions: int = 1500  # rows of the sinusoidal position table
    activation_function: str = "gelu"
    layer_norm_eps: float = 1e-5
    # Qwen3-ASR pads every clip's mel to whole chunks before the stem, so a clip shorter than one chunk is convolved
    # as a zero-padded full chunk; Qwen3-Omni convolves it at its own length.
    pad_short_clips: bool = False

    def __post_init__(self) -> None:
        for name in ("num_mel_bins", "d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim",
                     "downsample_hidden_size", "output_dim", "n_window", "max_source_positions"):
            _check(getattr(self, name) > 0, name, getattr(self, name), "use a positive value")
        _check(self.d_model % self.encoder_attention_heads == 0, "encoder_attention_heads",
               self.encoder_attention_heads, f"must divide d_model ({self.d_model})")
        _check(self.d_model % 2 == 0, "d_model", self.d_model, "the sinusoidal positions need an even width")
        _check(self.n_window_infer >= self.chunk_frames and self.n_window_infer % self.chunk_frames == 0,
               "n_window_infer", self.n_window_infer, f"use a positive multiple of 2 * n_window ({self.chunk_frames})")
        _check(self.max_source_positions >= self.chunk_tokens, "max_source_positions", self.max_source_positions,
               f"must cover one chunk's {self.chunk_tokens} tokens")
        _check(self.activation_function in ACTIVATIONS, "activation_function", self.activation_function,
               f"use one of {ACTIVATIONS}")

    @property
    def chunk_frames(self) -> int:
        """Mel frames per conv-stem chunk; positions restart in each."""
        return 2 * self.n_window

    @property
    def chunk_tokens(self) -> int:
        """Tokens a full chunk makes (13 for 100 frames)."""
        return stem_output_length(self.chunk_frames)

    @property
    def window_tokens(self) -> int:
        """Tokens per attention window (104 = 8 chunks); windows never cross clips."""
        return self.chunk_tokens * (self.n_window_infer // self.chunk_frames)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.encoder_attention_heads

    @property
    def stem_features(self) -> int:
        """Conv stem output flattened over channels and the 8x-downsampled mel axis (480 * 16 = 7680)."""
        return self.downsample_hidden_size * stem_output_length(self.num_mel_bins)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> AudioEncoderConfig:
        names = cls.__dataclass_fields__.keys()
        return cls(**{name: raw[name] for name in names if name in raw})

    @classmethod
    def from_checkpoint(cls, ckpt_dir: Path | str) -> AudioEncoderConfig:
        raw = json.loads((Path(ckpt_dir) / "config.json").read_text())
        family = family_of(raw)
        audio = family.thinker.get("audio_config")
        if audio is None:
            raise ValueError(f"{ckpt_dir}/config.json has no thinker_config.audio_config; is it a Qwen3-Omni "
                             "checkpoint?")
        return cls.from_dict({**audio, "pad_short_clips": family.family == "qwen3-asr"})


def _check(ok: bool, field: str, value: object, fix: str) -> None:
    if not ok:
        raise ValueError(f"AudioEncoderConfig.{field}={value!r} is invalid: {fix}")
