"""Test audio made in-test: sine tones encoded by soundfile (WAV, FLAC, OGG, MP3) and PyAV (M4A, MKV, MP4 video)."""
from __future__ import annotations

import io

import av
import numpy as np
import soundfile as sf


def tone(rate: int, seconds: float, channels: int = 1, freq: float = 440.0) -> np.ndarray:
    """[frames, channels] float32; channel c has amplitude 0.5 / (c + 1), so a downmix is easy to predict."""
    t = np.arange(int(rate * seconds)) / rate
    wave = np.sin(2 * np.pi * freq * t)
    return np.stack([wave * 0.5 / (c + 1) for c in range(channels)], axis=1).astype(np.float32)


def soundfile_bytes(fmt: str, subtype: str, rate: int, seconds: float, channels: int = 1) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, tone(rate, seconds, channels), rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def pyav_bytes(container: str, codec: str, rate: int, seconds: float, channels: int = 1, video: bool = False) -> bytes:
    """An audio stream (optionally beside a tiny black mpeg4 video at 10 fps) muxed into `container`."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        if video:
            vstream = out.add_stream("mpeg4", rate=10)
            vstream.width, vstream.height, vstream.pix_fmt = 64, 48, "yuv420p"
        astream = out.add_stream(codec, rate=rate)
        astream.layout = "stereo" if channels == 2 else "mono"
        planar = np.ascontiguousarray(tone(rate, seconds, channels).T)  # [channels, n]
        step = astream.codec_context.frame_size or 1024
        next_image = 0
        for start in range(0, planar.shape[1], step):
            frame = av.AudioFrame.from_ndarray(planar[:, start:start + step].copy(), format="fltp",
                                               layout=astream.layout.name)
            frame.sample_rate, frame.pts = rate, start
            out.mux(astream.encode(frame))
            while video and next_image <= start / rate * 10:
                image = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
                image.pts = next_image
                next_image += 1
                out.mux(vstream.encode(image))
        out.mux(astream.encode())
        if video:
            out.mux(vstream.encode())
    return buf.getvalue()


def video_only_bytes(seconds: float = 1.0) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        vstream = out.add_stream("mpeg4", rate=10)
        vstream.width, vstream.height, vstream.pix_fmt = 64, 48, "yuv420p"
        for i in range(int(seconds * 10)):
            image = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            image.pts = i
            out.mux(vstream.encode(image))
        out.mux(vstream.encode())
    return buf.getvalue()
