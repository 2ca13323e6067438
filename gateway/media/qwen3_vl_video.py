"""Qwen3-VL's video rules, which Qwen3.5 serves: the frames its video processor samples, the size it resizes a whole
clip to (one pixel budget for all sampled frames), and the timestamp its processor writes before each temporal patch.
Each is transformers' `Qwen3VLVideoProcessor` / `Qwen3VLProcessor` rule, so our frames and prompt are the reference's.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gateway.media.sizes import MAX_ASPECT_RATIO, Size


def frame_indices(total_frames: int, source_fps: float, fps: float, min_frames: int, max_frames: int) -> list[int]:
    """total/source_fps*fps frames (truncated), raised to `min_frames`, capped by `max_frames` and the clip, spread
    evenly over the clip from its first frame to its last (rounded half to even, as numpy rounds)."""
    count = int(total_frames / source_fps * fps)
    count = min(max(count, min_frames), max_frames, total_frames)
    return np.linspace(0, total_frames - 1, count).round().astype(int).tolist()


def clip_pixel_budget(num_frames: int, factor: int, min_pixels: int, max_pixels: int, cap_per_frame: bool,
                      max_tokens_per_frame: int) -> int:
    """The clip's pixel maximum: the configured one, or with the per-frame cap each frame's share of it, capped at
    `max_tokens_per_frame` merged tokens and floored at 1.05x the minimum."""
    if not cap_per_frame:
        return max_pixels
    per_frame = max(min(max_tokens_per_frame * factor * factor, max_pixels // num_frames), int(min_pixels * 1.05))
    return per_frame * num_frames


def clip_size(num_frames: int, height: int, width: int, temporal_factor: int, factor: int, min_pixels: int,
              max_pixels: int) -> Size:
    """Both sides multiples of `factor`, aspect ratio kept, the whole clip (frames rounded to the temporal patch) within
    [min_pixels, max_pixels]. Raises ValueError for a clip shorter than one temporal patch or too elongated."""
    if num_frames < temporal_factor:
        raise ValueError(f"{num_frames} sampled frames are fewer than one temporal patch ({temporal_factor})")
    if height < factor or width < factor:  # upscaled first so the shorter side covers one merged patch
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.1f} exceeds {MAX_ASPECT_RATIO}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt(num_frames * height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return Size(h_bar, w_bar)


def patch_timestamps(indices: Sequence[int], source_fps: float, temporal_patch_size: int) -> tuple[float, ...]:
    """Seconds of each temporal patch: the mean of its first and last frame's time in the source (an odd count repeats
    the last frame, as the patchifier does)."""
    padded = list(indices) + [indices[-1]] * (-len(indices) % temporal_patch_size)
    times = [i / source_fps for i in padded]
    return tuple((times[k] + times[k + temporal_patch_size - 1]) / 2 for k in range(0, len(times), temporal_patch_size))


def timestamp_text(seconds: float) -> str:
    """What the processor writes before a temporal patch's frame block."""
    return f"<{seconds:.1f} seconds>"
