"""Small real media files for mesh tests: a PNG, a WAV and an MP4, made in-process."""
from __future__ import annotations

import io

import av
import numpy as np
import soundfile as sf
from PIL import Image


def png(height: int = 96, width: int = 128, seed: int = 0) -> bytes:
    pixels = (np.random.default_rng(seed).random((height, width, 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def wav(seconds: float = 1.5, rate: int = 16_000, seed: int = 0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).normal(0, 0.05, t.shape)
    samples = (0.3 * np.sin(2 * np.pi * 440 * t) + noise).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def mp4(num_frames: int = 8, fps: int = 4, height: int = 64, width: int = 96, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width, stream.pix_fmt = height, width, "yuv420p"
        for _ in range(num_frames):
            frame = av.VideoFrame.from_ndarray((rng.random((height, width, 3)) * 255).astype(np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return buf.getvalue()
