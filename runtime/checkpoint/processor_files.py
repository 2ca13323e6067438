"""Writes `preprocessor_config.json` and `video_preprocessor_config.json` with the released checkpoint's values."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.checkpoint.tokenizer_files import write_json

# Vision front end: 16 px patches, 2-frame temporal patches, 2x2 merge, pixel budget 56^2 .. 3584^2.
PATCH_SIZE = 16
TEMPORAL_PATCH_SIZE = 2
MERGE_SIZE = 2
MIN_PIXELS = 3136
MAX_PIXELS = 12845056
IMAGE_MEAN = [0.5, 0.5, 0.5]
IMAGE_STD = [0.5, 0.5, 0.5]
# Audio front end: Whisper log-mel, 128 bins, 25 ms window, 10 ms hop at 16 kHz.
SAMPLING_RATE = 16000
FEATURE_SIZE = 128
HOP_LENGTH = 160
N_FFT = 400
CHUNK_LENGTH = 300


def vit_front_end_fields(processor_class: str) -> dict[str, Any]:
    """What every Qwen ViT processor file says about patches, merge, normalisation and resampling."""
    return {
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": list(IMAGE_MEAN),
        "image_std": list(IMAGE_STD),
        "merge_size": MERGE_SIZE,
        "patch_size": PATCH_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "rescale_factor": 1 / 255,
        "resample": 3,
        "processor_class": processor_class,
    }


def _vision_fields() -> dict[str, Any]:
    return {**vit_front_end_fields("Qwen3OmniMoeProcessor"), "max_pixels": MAX_PIXELS, "min_pixels": MIN_PIXELS,
            "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}}


def preprocessor_config() -> dict[str, Any]:
    """Image processor and Whisper feature extractor fields share one file, as in the released checkpoint."""
    return {
        **_vision_fields(),
        "image_processor_type": "Qwen2VLImageProcessor",
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": FEATURE_SIZE,
        "sampling_rate": SAMPLING_RATE,
        "hop_length": HOP_LENGTH,
        "n_fft": N_FFT,
        "chunk_length": CHUNK_LENGTH,
        "n_samples": CHUNK_LENGTH * SAMPLING_RATE,
        "nb_max_frames": CHUNK_LENGTH * SAMPLING_RATE // HOP_LENGTH,
        "padding_side": "right",
        "padding_value": 0.0,
        "dither": 0.0,
        "return_attention_mask": True,
    }


def video_preprocessor_config() -> dict[str, Any]:
    return {
        **_vision_fields(),
        "video_processor_type": "Qwen2VLVideoProcessor",
        "do_sample_frames": False,
        "min_frames": 4,
        "max_frames": 768,
    }


def write_processor_files(out_dir: Path) -> None:
    write_json(out_dir / "preprocessor_config.json", preprocessor_config())
    write_json(out_dir / "video_preprocessor_config.json", video_preprocessor_config())
