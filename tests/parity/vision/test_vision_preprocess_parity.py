"""Gateway decode + our patchify equal transformers' image processor `pixel_values`; video equals its processor math."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gateway.media.vision import VisionMediaConfig, decode_image
from services.vision.preprocess import VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig

pil_processor = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")

# (height, width) of source images: already multiples of 32, odd sizes, portrait, landscape, tiny (upscaled).
SOURCE_SIZES = [(64, 96), (70, 100), (123, 45), (480, 640), (20, 20), (33, 700)]


@pytest.fixture(scope="module")
def processing(demo_ckpt: Path) -> VisionProcessingConfig:
    return VisionProcessingConfig.from_checkpoint(demo_ckpt)


@pytest.fixture(scope="module")
def hf_image_processor(demo_ckpt: Path):  # noqa: ANN201 - a transformers object
    return pil_processor.Qwen2VLImageProcessorPil.from_pretrained(demo_ckpt)


def png_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def test_checkpoint_settings_match_the_reference_processor(
    processing: VisionProcessingConfig, hf_image_processor
) -> None:
    assert processing.image_min_pixels == hf_image_processor.size["shortest_edge"]
    assert processing.image_max_pixels == hf_image_processor.size["longest_edge"]
    assert list(processing.image_mean) == list(hf_image_processor.image_mean)
    assert list(processing.image_std) == list(hf_image_processor.image_std)
    assert (processing.patch_size, processing.temporal_patch_size, processing.merge_size) == (
        hf_image_processor.patch_size, hf_image_processor.temporal_patch_size, hf_image_processor.merge_size,
    )


@pytest.mark.parametrize("size", SOURCE_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_image_pixel_values_equal_reference(
    processing: VisionProcessingConfig, hf_image_processor, size: tuple[int, int]
) -> None:
    rng = np.random.default_rng(size[0] * 1000 + size[1])
    array = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    ref = hf_image_processor(images=[Image.fromarray(array)], return_tensors="pt")
    decoded = decode_image(png_bytes(array), "image", VisionMediaConfig.from_processing(processing))
    rows, grid = VisionPreprocessor(processing, "cpu").image(torch.from_numpy(decoded.frames))
    assert list(grid) == ref["image_grid_thw"][0].tolist() and list(decoded.grid) == list(grid)
    assert decoded.num_tokens == int(ref["image_grid_thw"][0].prod()) // processing.merge_size**2
    assert torch.equal(rows, ref["pixel_values"])  # bit for bit


def reference_video_pixel_values(frames: torch.Tensor, cfg: VisionProcessingConfig) -> torch.Tensor:
    """The Qwen2-VL video processor's math on already-resized frames (it needs torchvision, absent here):
    fused rescale+normalise in float32, last frame repeated to a multiple of T, (C, T, ph, pw) rows."""
    video = frames.permute(0, 3, 1, 2).to(torch.float32)[None]  # [1, F, C, H, W]
    mean = torch.tensor(cfg.video_mean) * (1.0 / cfg.rescale_factor)
    std = torch.tensor(cfg.video_std) * (1.0 / cfg.rescale_factor)
    video = (video - mean[:, None, None]) / std[:, None, None]
    temporal, patch, merge = cfg.temporal_patch_size, cfg.patch_size, cfg.merge_size
    if pad := -video.shape[1] % temporal:
        video = torch.cat([video, video[:, -1:].expand(-1, pad, -1, -1, -1)], dim=1)
    _, num_frames, channels, height, width = video.shape
    gt, gh, gw = num_frames // temporal, height // patch, width // patch
    video = video.view(1, gt, temporal, channels, gh // merge, merge, patch, gw // merge, merge, patch)
    video = video.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return video.reshape(gt * gh * gw, channels * temporal * patch * patch)


@pytest.mark.parametrize("num_frames", [4, 5, 1])
def test_video_pixel_values_equal_reference_math(processing: VisionProcessingConfig, num_frames: int) -> None:
    gen = torch.Generator().manual_seed(num_frames)
    frames = torch.randint(0, 256, (num_frames, 64, 96, 3), dtype=torch.uint8, generator=gen)
    rows, grid = VisionPreprocessor(processing, "cpu").video(frames)
    assert list(grid) == [-(-num_frames // 2), 4, 6]
    # the reference fuses rescale into mean/std, so values may differ from ours by one float32 ulp
    torch.testing.assert_close(rows, reference_video_pixel_values(frames, processing), rtol=1e-6, atol=1e-6)


def test_video_processor_itself_when_importable(processing: VisionProcessingConfig, demo_ckpt: Path) -> None:
    pytest.importorskip("torchvision")
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    processor = Qwen2VLVideoProcessor.from_pretrained(demo_ckpt)
    frames = torch.randint(0, 256, (5, 384, 384, 3), dtype=torch.uint8)  # inside the Omni video pixel bounds
    size = {"shortest_edge": processing.video_min_pixels, "longest_edge": processing.video_max_pixels}
    ref = processor(videos=[frames.permute(0, 3, 1, 2)], size=size, return_tensors="pt")
    rows, grid = VisionPreprocessor(processing, "cpu").video(frames)
    assert list(grid) == ref["video_grid_thw"][0].tolist()
    torch.testing.assert_close(rows, ref["pixel_values_videos"], rtol=1e-6, atol=1e-6)
