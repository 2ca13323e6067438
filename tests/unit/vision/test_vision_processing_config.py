"""VisionProcessingConfig: read from the checkpoint's processor files, defaults, and validation errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.media.vision import VisionMediaConfig
from runtime.vision_processing import (
    OMNI_VIDEO_MAX_PIXELS,
    OMNI_VIDEO_MIN_PIXELS,
    VisionProcessingConfig,
)

IMAGE_FILE = {
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "size": {"shortest_edge": 1, "longest_edge": 2},  # top-level min/max_pixels win, as in the reference
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "rescale_factor": 1 / 255,
}
VIDEO_FILE = {**IMAGE_FILE, "image_mean": [0.4, 0.5, 0.6], "min_frames": 2, "max_frames": 100, "fps": 1.5}


def write(tmp_path: Path, video: bool) -> Path:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(IMAGE_FILE))
    if video:
        (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(VIDEO_FILE))
    return tmp_path


def test_reads_both_files(tmp_path: Path) -> None:
    cfg = VisionProcessingConfig.from_checkpoint(write(tmp_path, video=True))
    assert (cfg.image_min_pixels, cfg.image_max_pixels) == (3136, 12845056)
    assert cfg.image_mean == (0.5, 0.5, 0.5) and cfg.video_mean == (0.4, 0.5, 0.6)
    assert (cfg.video_min_frames, cfg.video_max_frames, cfg.video_fps) == (2, 100, 1.5)
    # The Omni processor passes its own video bounds on every call, so the file's are not used.
    assert (cfg.video_min_pixels, cfg.video_max_pixels) == (OMNI_VIDEO_MIN_PIXELS, OMNI_VIDEO_MAX_PIXELS)
    assert cfg.factor == 32 and cfg.patch_dim == 1536


def test_video_file_is_optional(tmp_path: Path) -> None:
    cfg = VisionProcessingConfig.from_checkpoint(write(tmp_path, video=False))
    assert cfg.video_mean == cfg.image_mean and cfg.video_fps == 2.0 and cfg.video_max_frames == 768


def test_size_dict_is_used_without_min_max_keys() -> None:
    image = {k: v for k, v in IMAGE_FILE.items() if k not in ("min_pixels", "max_pixels")}
    image["size"] = {"shortest_edge": 100, "longest_edge": 5000}
    cfg = VisionProcessingConfig.from_dicts(image, None)
    assert (cfg.image_min_pixels, cfg.image_max_pixels) == (100, 5000)


def test_missing_image_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="preprocessor_config.json"):
        VisionProcessingConfig.from_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"patch_size": 0}, "patch_size=0"),
        ({"image_min_pixels": 10, "image_max_pixels": 5}, "image_min_pixels=10"),
        ({"video_min_pixels": 0}, "video_min_pixels=0"),
        ({"image_mean": (0.5, 0.5)}, "image_mean"),
        ({"video_std": (0.5, 0.0, 0.5)}, "video_std"),
        ({"video_fps": 0.0}, "video_fps=0.0"),
        ({"video_min_frames": 9, "video_max_frames": 8}, "video_min_frames=9"),
        ({"video_sampling": "qwen9"}, "video_sampling='qwen9' must be one of"),
    ],
)
def test_validation_names_the_field(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        VisionProcessingConfig(**kwargs)


def test_gateway_config_from_processing(tmp_path: Path) -> None:
    cfg = VisionProcessingConfig.from_checkpoint(write(tmp_path, video=True))
    media = VisionMediaConfig.from_processing(cfg, max_image_pixels=1000)
    assert media.image_max_pixels == 12845056 and media.video_fps == 1.5 and media.video_max_frames == 100
    assert media.max_image_pixels == 1000 and media.factor == 32


@pytest.mark.parametrize(
    "kwargs,needle", [({"video_fps": -1.0}, "video_fps"), ({"max_image_pixels": 0}, "max_image_pixels")]
)
def test_gateway_config_validation(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        VisionMediaConfig(**kwargs)


def test_qwen3_vl_video_rules_from_either_processor_file() -> None:
    """Qwen3.5's video file names Qwen3VLVideoProcessor (its bounds are per clip); without one, the image file's
    processor_class says Qwen3VLProcessor and the class defaults apply."""
    video = {"video_processor_type": "Qwen3VLVideoProcessor", "size": {"shortest_edge": 4096, "longest_edge": 1 << 24},
             "cap_pixels_per_frame": True, "max_video_tokens": 512}
    cfg = VisionProcessingConfig.from_dicts({}, video)
    assert (cfg.video_sampling, cfg.video_min_pixels, cfg.video_max_pixels) == ("qwen3_vl", 4096, 1 << 24)
    assert (cfg.video_cap_pixels_per_frame, cfg.video_max_tokens_per_frame) == (True, 512)
    bare = VisionProcessingConfig.from_dicts({"processor_class": "Qwen3VLProcessor"}, None)
    assert (bare.video_sampling, bare.video_min_pixels, bare.video_max_pixels) == ("qwen3_vl", 128 * 32 * 32,
                                                                                   32 * 32 * 768)
    omni = VisionProcessingConfig.from_dicts({"processor_class": "Qwen3OmniMoeProcessor"}, None)
    assert omni.video_sampling == "qwen2_vl" and not omni.video_cap_pixels_per_frame
