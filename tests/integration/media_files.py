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


def mp4_with_sound(seconds: float = 2.0, fps: int = 4, rate: int = 16_000, height: int = 64, width: int = 96,
                   seed: int = 0) -> bytes:
    """Random frames and a tone-plus-noise AAC track, muxed in time order."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    sound = (0.3 * np.sin(2 * np.pi * 330 * t) + rng.normal(0, 0.05, t.shape)).astype(np.float32)[None]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        video = container.add_stream("libx264", rate=fps)
        video.height, video.width, video.pix_fmt = height, width, "yuv420p"
        audio = container.add_stream("aac", rate=rate)
        audio.layout = "mono"
        step = audio.codec_context.frame_size or 1024
        next_frame = 0
        for start in range(0, sound.shape[1], step):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(sound[:, start:start + step]), format="fltp",
                                               layout="mono")
            frame.sample_rate, frame.pts = rate, start
            container.mux(audio.encode(frame))
            while next_frame < seconds * fps and next_frame <= start / rate * fps:
                pixels = (rng.random((height, width, 3)) * 255).astype(np.uint8)
                image = av.VideoFrame.from_ndarray(pixels, format="rgb24")
                image.pts = next_frame
                next_frame += 1
                container.mux(video.encode(image))
        container.mux(audio.encode())
        container.mux(video.encode())
    return buf.getvalue()
