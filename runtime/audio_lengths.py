"""Pure host arithmetic on clip lengths (samples -> mel frames -> AuT tokens); no torch, so the gateway can use it."""
from __future__ import annotations

HOP_LENGTH = 160  # samples per mel frame at 16 kHz (100 frames/s)
CHUNK_FRAMES = 100  # mel frames per conv-stem chunk (2 * n_window)
STEM_STRIDE = 8  # three stride-2 convolutions


def mel_frame_count(num_samples: int, hop_length: int = HOP_LENGTH) -> int:
    """Mel frames made from `num_samples` samples: the STFT's trailing frame is dropped, as Whisper does."""
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    return num_samples // hop_length


def stem_output_length(num_frames: int) -> int:
    """Tokens the conv stem makes from one chunk of `num_frames` frames: ceil(ceil(ceil(n/2)/2)/2) == ceil(n/8)."""
    return -(-num_frames // STEM_STRIDE)


def audio_token_count(num_mel_frames: int, chunk_frames: int = CHUNK_FRAMES) -> int:
    """AuT tokens for a clip of `num_mel_frames` frames: 13 per full 100-frame chunk plus ceil(tail / 8).

    Equal to transformers' `_get_feat_extract_output_lengths` for n_window = 50; the thinker reserves this many
    `<|audio_pad|>` positions, so the gateway and the encoder must agree on it.
    """
    if num_mel_frames < 0:
        raise ValueError(f"num_mel_frames must be >= 0, got {num_mel_frames}")
    full, tail = divmod(num_mel_frames, chunk_frames)
    return full * stem_output_length(chunk_frames) + stem_output_length(tail)
