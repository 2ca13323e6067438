"""`VisionProcessingConfig`: pixel bounds, normalisation and sampling settings from the checkpoint's processor files."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE_CONFIG_FILE = "preprocessor_config.json"
VIDEO_CONFIG_FILE = "video_preprocessor_config.json"

# The Qwen3-Omni processor passes these video pixel bounds to its video processor on every call, overriding
# whatever `video_preprocessor_config.json` says; we follow the reference, so the file's video bounds are not read.
OMNI_VIDEO_MIN_PIXELS = 128 * 32 * 32
OMNI_VIDEO_MAX_PIXELS = 768 * 32 * 32
# The reference image processor's own defaults, used for keys a processor file leaves out.
DEFAULT_IMAGE_MIN_PIXELS = 56 * 56
DEFAULT_IMAGE_MAX_PIXELS = 28 * 28 * 1280
DEFAULT_VIDEO_FPS = 2.0
# How a checkpoint's video processor samples, resizes and lays out a clip: Qwen2-VL's (Qwen3-Omni: fps-spaced frames,
# per-frame pixel bounds) or Qwen3-VL's (Qwen3.5: evenly spread frames, one pixel budget for the whole clip, frames
# laid out one per timestamped block).
VIDEO_SAMPLINGS = ("qwen2_vl", "qwen3_vl")
QWEN3_VL_VIDEO_PROCESSOR = "Qwen3VLVideoProcessor"
QWEN3_VL_PROCESSOR = "Qwen3VLProcessor"
# Qwen3VLVideoProcessor's class defaults, for keys its file leaves out.
QWEN3_VL_VIDEO_MIN_PIXELS = 128 * 32 * 32
QWEN3_VL_VIDEO_MAX_PIXELS = 32 * 32 * 768
QWEN3_VL_MAX_TOKENS_PER_FRAME = 768


@dataclass(frozen=True)
class VisionProcessingConfig:
    """How uint8 frames become normalised patch rows, and the bounds the gateway resizes and samples within."""

    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    image_min_pixels: int = DEFAULT_IMAGE_MIN_PIXELS
    image_max_pixels: int = DEFAULT_IMAGE_MAX_PIXELS
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    rescale_factor: float = 1 / 255
    video_min_pixels: int = OMNI_VIDEO_MIN_PIXELS
    video_max_pixels: int = OMNI_VIDEO_MAX_PIXELS
    video_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    video_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    video_fps: float = DEFAULT_VIDEO_FPS
    video_min_frames: int = 4
    video_max_frames: int = 768
    video_sampling: str = "qwen2_vl"  # one of VIDEO_SAMPLINGS; for "qwen3_vl" the video pixel bounds are per clip
    video_cap_pixels_per_frame: bool = False  # qwen3_vl: cap each frame's share of the clip's budget (its option)
    video_max_tokens_per_frame: int = QWEN3_VL_MAX_TOKENS_PER_FRAME  # that cap, in merged tokens per frame

    def __post_init__(self) -> None:
        if self.video_sampling not in VIDEO_SAMPLINGS:
            raise ValueError(f"video_sampling={self.video_sampling!r} must be one of {VIDEO_SAMPLINGS}")
        for name in ("patch_size", "temporal_patch_size", "merge_size", "video_min_frames", "video_max_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        for lo, hi in (("image_min_pixels", "image_max_pixels"), ("video_min_pixels", "video_max_pixels")):
            if not 0 < getattr(self, lo) <= getattr(self, hi):
                raise ValueError(
                    f"{lo}={getattr(self, lo)} and {hi}={getattr(self, hi)} must satisfy 0 < {lo} <= {hi}; "
                    "swap or fix them"
                )
        for name in ("image_mean", "image_std", "video_mean", "video_std"):
            if len(getattr(self, name)) != 3:
                raise ValueError(f"{name}={getattr(self, name)} must have one value per RGB channel")
        for name in ("image_std", "video_std"):
            if min(getattr(self, name)) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        if self.video_fps <= 0:
            raise ValueError(f"video_fps={self.video_fps} must be positive; the default is {DEFAULT_VIDEO_FPS}")
        if self.video_min_frames > self.video_max_frames:
            raise ValueError(
                f"video_min_frames={self.video_min_frames} exceeds video_max_frames={self.video_max_frames}"
            )

    @property
    def factor(self) -> int:
        """Resized heights and widths are multiples of this: one merged token covers factor×factor pixels."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self) -> int:
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size

    @classmethod
    def from_dicts(cls, image: dict[str, Any], video: dict[str, Any] | None) -> VisionProcessingConfig:
        """From the two processor files' contents; `video` None when the checkpoint ships no video file."""
        defaults = cls()
        image_min, image_max = _pixel_bounds(image, DEFAULT_IMAGE_MIN_PIXELS, DEFAULT_IMAGE_MAX_PIXELS)
        video = video or {}
        image_mean = _triple(image.get("image_mean", defaults.image_mean))
        image_std = _triple(image.get("image_std", defaults.image_std))
        fps = video.get("fps")
        # a checkpoint without a video file still names its processor (Qwen3.5's is Qwen3VLProcessor)
        qwen3_vl = (video.get("video_processor_type") == QWEN3_VL_VIDEO_PROCESSOR
                    or (not video and image.get("processor_class") == QWEN3_VL_PROCESSOR))
        # Qwen3-Omni's processor overrides its video file's bounds on every call; Qwen3-VL's takes them from the file
        video_min, video_max = (_pixel_bounds(video, QWEN3_VL_VIDEO_MIN_PIXELS, QWEN3_VL_VIDEO_MAX_PIXELS) if qwen3_vl
                                else (OMNI_VIDEO_MIN_PIXELS, OMNI_VIDEO_MAX_PIXELS))
        return cls(
            patch_size=int(image.get("patch_size", defaults.patch_size)),
            temporal_patch_size=int(image.get("temporal_patch_size", defaults.temporal_patch_size)),
            merge_size=int(image.get("merge_size", defaults.merge_size)),
            image_min_pixels=image_min,
            image_max_pixels=image_max,
            image_mean=image_mean,
            image_std=image_std,
            rescale_factor=float(image.get("rescale_factor", defaults.rescale_factor)),
            video_min_pixels=video_min,
            video_max_pixels=video_max,
            video_mean=_triple(video.get("image_mean", image_mean)),
            video_std=_triple(video.get("image_std", image_std)),
            video_fps=float(fps) if fps is not None else DEFAULT_VIDEO_FPS,
            video_min_frames=int(video.get("min_frames", defaults.video_min_frames)),
            video_max_frames=int(video.get("max_frames", defaults.video_max_frames)),
            video_sampling="qwen3_vl" if qwen3_vl else "qwen2_vl",
            video_cap_pixels_per_frame=bool(video.get("cap_pixels_per_frame") or False),
            video_max_tokens_per_frame=int(video.get("max_video_tokens", QWEN3_VL_MAX_TOKENS_PER_FRAME)),
        )

    @classmethod
    def from_checkpoint(cls, ckpt_dir: Path) -> VisionProcessingConfig:
        """From `preprocessor_config.json` and, when present, `video_preprocessor_config.json`."""
        ckpt_dir = Path(ckpt_dir)
        image_path = ckpt_dir / IMAGE_CONFIG_FILE
        if not image_path.exists():
            raise FileNotFoundError(
                f"{image_path} is missing; a Qwen3-Omni checkpoint ships its image processor settings there"
            )
        video_path = ckpt_dir / VIDEO_CONFIG_FILE
        video = json.loads(video_path.read_text()) if video_path.exists() else None
        return cls.from_dicts(json.loads(image_path.read_text()), video)


def _pixel_bounds(raw: dict[str, Any], default_min: int, default_max: int) -> tuple[int, int]:
    """(min, max) pixels; top-level `min_pixels`/`max_pixels` win over `size`, as in the reference processors."""
    size = raw.get("size") or {}
    lo = raw.get("min_pixels", size.get("shortest_edge", default_min))
    hi = raw.get("max_pixels", size.get("longest_edge", default_max))
    return int(lo), int(hi)


def _triple(values: Any) -> tuple[float, float, float]:
    """One value per channel; a scalar applies to all three. A wrong length is left for `__post_init__` to name."""
    if isinstance(values, (int, float)):
        return (float(values),) * 3
    return tuple(float(v) for v in values)  # type: ignore[return-value]
