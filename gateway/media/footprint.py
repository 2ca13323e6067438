"""Bytes a media item will hold once decoded, from its header alone: what the gateway's media budget admits by.

Estimates count the peak while decoding (the full-size canvas, the source-rate samples) plus what is kept (resized
frames, 16 kHz samples). A header the probe cannot read counts as the largest item the decoders accept, which
decoding then refuses anyway.
"""
from __future__ import annotations

import io
import math

import av
import soundfile as sf

from runtime.errors import InvalidArgument
from gateway.media.audio import TARGET_RATE
from gateway.media.wav import parse_wav
from gateway.media.vision import (VisionMediaConfig, duration_seconds, open_image, open_video, target_size,
                                  video_size)

RGB, RGBA, FLOAT32 = 3, 4, 4
COPIES = 2  # decoded frames are listed then stacked, samples decoded then resampled: two live at the peak
WORST_SOURCE_RATE, WORST_CHANNELS = 48_000, 2


def image_bytes(data: bytes, field: str, cfg: VisionMediaConfig) -> int:
    im = open_image(data, field, cfg)  # refuses a canvas over the pixel cap from the header
    size = target_size(field, im.height, im.width, cfg, video=False)
    return COPIES * im.width * im.height * RGBA + size.height * size.width * RGB


def video_bytes(data: bytes, field: str, cfg: VisionMediaConfig) -> int:
    # qwen3_vl's pixel maximum is the whole clip's; qwen2_vl's is each frame's
    clip_pixels = cfg.video_max_pixels * (1 if cfg.video_sampling == "qwen3_vl" else cfg.video_max_frames)
    worst = clip_pixels * RGB * COPIES + cfg.max_video_frame_pixels * RGBA
    try:
        with open_video(data, field) as container:
            if not container.streams.video:
                return worst
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            seconds = duration_seconds(stream)
            frames = max(1, cfg.video_max_frames if seconds is None
                         else min(math.ceil(seconds * cfg.video_fps), cfg.video_max_frames))
            # qwen3_vl samples at least video_min_frames and sizes the clip by its frame count
            if cfg.video_sampling == "qwen3_vl":
                frames = max(frames, cfg.video_min_frames)
            size = video_size(field, height, width, frames, cfg)
    except (InvalidArgument, av.FFmpegError, ValueError, ZeroDivisionError, AttributeError):
        return worst
    return frames * size.height * size.width * RGB * COPIES + width * height * RGBA


def audio_bytes(data: bytes, max_seconds: float) -> int:
    """A clip's samples at its source rate and channels, then at 16 kHz mono."""
    seconds, rate, channels = max_seconds, WORST_SOURCE_RATE, WORST_CHANNELS
    if (wav := parse_wav(data)) is not None:
        return _audio_bytes(wav.seconds, wav.rate, wav.channels, max_seconds)
    try:
        info = sf.info(io.BytesIO(data))
        seconds, rate, channels = info.duration, info.samplerate, info.channels
    except (sf.LibsndfileError, RuntimeError, TypeError):  # M4A and other containers: the header FFmpeg reads
        try:
            with av.open(io.BytesIO(data), mode="r") as container:
                if container.streams.audio:
                    ctx = container.streams.audio[0].codec_context
                    rate, channels = ctx.sample_rate or rate, ctx.channels or channels
                if container.duration is not None:
                    seconds = container.duration / av.time_base
        except (av.FFmpegError, ValueError, UnicodeDecodeError):
            pass
    return _audio_bytes(seconds, rate, channels, max_seconds)


def _audio_bytes(seconds: float, rate: int, channels: int, max_seconds: float) -> int:
    seconds = min(max(seconds, 0.0), max_seconds)
    return int(seconds * (rate * channels + TARGET_RATE) * FLOAT32 * COPIES)
