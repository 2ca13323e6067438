"""Which frames of a video the model sees: the reference processor's rule, so our frames are its frames."""
from __future__ import annotations

import io
import math

import av
import torch


def reference_frame_indices(total_frames: int, source_fps: float, fps: float, min_frames: int, max_frames: int,
                            temporal_patch_size: int) -> list[int] | None:
    """Frame indices the Qwen2-VL / Qwen3-Omni video processor samples at `fps` (its `sample_frames`):
    total/source_fps*fps frames, raised to `min_frames`, capped by `max_frames` and the clip, floored to a multiple
    of the temporal patch, spread evenly (float32 steps, truncated, as the reference computes them).

    None when the clip has fewer frames than one temporal patch (the reference cannot sample it).
    """
    cap = math.floor(min(max_frames, total_frames) / temporal_patch_size) * temporal_patch_size
    wanted = total_frames / source_fps * fps
    count = math.floor(min(max(wanted, min_frames), cap, total_frames) / temporal_patch_size) * temporal_patch_size
    if count <= 0:
        return None
    return torch.arange(0, total_frames, total_frames / count).int().tolist()


def count_frames(data: bytes) -> int:
    """Frames of the first video stream, counted from its packets (no decoding) when the header does not say."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        if stream.frames:
            return int(stream.frames)
        return sum(1 for packet in container.demux(stream) if packet.size)
