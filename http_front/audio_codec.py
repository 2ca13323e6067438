"""The spoken answer (16-bit mono PCM) in the formats OpenAI clients ask for: wav, pcm, flac, mp3, opus, aac."""
from __future__ import annotations

import io

import av
import numpy as np

from omnimesh import wav_bytes

# format -> (container, encoder)
_ENCODED = {"mp3": ("mp3", "libmp3lame"), "flac": ("flac", "flac"), "opus": ("ogg", "libopus"), "aac": ("adts", "aac")}
MIME_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "pcm16": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg",
              "opus": "audio/ogg", "aac": "audio/aac"}


def encode_audio(pcm16: bytes, sample_rate: int, fmt: str) -> bytes:
    """`pcm16` as the bytes of a `fmt` file; "pcm" and "pcm16" are the raw samples."""
    if fmt in ("pcm", "pcm16"):
        return pcm16
    if fmt == "wav":
        return wav_bytes(pcm16, sample_rate)
    container, codec = _ENCODED[fmt]
    samples = np.frombuffer(pcm16, dtype="<i2")[None]  # [1, n]: packed mono
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=sample_rate, layout="mono")
        if samples.size:
            frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
            frame.sample_rate = sample_rate
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()
