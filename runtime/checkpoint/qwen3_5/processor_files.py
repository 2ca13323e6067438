"""Qwen3.5's processor files: `Qwen3VLProcessor` over the Qwen2-VL image processor and the Qwen3-VL video
processor (temporal-aware resize, frames sampled at 2 fps, timestamps from their source indices)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.checkpoint.processor_files import vit_front_end_fields
from runtime.checkpoint.tokenizer_files import write_json

PROCESSOR_CLASS = "Qwen3VLProcessor"
# Pixel budgets of the Qwen3-VL processor files: per image, and per whole video (all its sampled frames together).
IMAGE_SIZE = {"shortest_edge": 65536, "longest_edge": 16777216}
VIDEO_SIZE = {"shortest_edge": 4096, "longest_edge": 25165824}
VIDEO_FPS = 2


def _common() -> dict[str, Any]:
    return vit_front_end_fields(PROCESSOR_CLASS)


def preprocessor_config() -> dict[str, Any]:
    return {**_common(), "image_processor_type": "Qwen2VLImageProcessor", "size": dict(IMAGE_SIZE)}


def video_preprocessor_config() -> dict[str, Any]:
    return {**_common(), "video_processor_type": "Qwen3VLVideoProcessor", "size": dict(VIDEO_SIZE),
            "do_sample_frames": True, "fps": VIDEO_FPS, "min_frames": 4, "max_frames": 768}


def write_processor_files(out_dir: Path) -> None:
    write_json(out_dir / "preprocessor_config.json", preprocessor_config())
    write_json(out_dir / "video_preprocessor_config.json", video_preprocessor_config())
