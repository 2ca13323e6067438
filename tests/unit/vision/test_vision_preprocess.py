"""VisionPreprocessor: patch row layout, temporal padding, normalisation and input checks."""
from __future__ import annotations

import pytest
import torch

from services.vision.model.grid import Grid
from services.vision.preprocess import MediaFrames, MediaKind, VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig

CFG = VisionProcessingConfig(image_mean=(0.1, 0.2, 0.3), image_std=(0.5, 0.25, 2.0))


def expected_value(frames: torch.Tensor, row: int, col: int, grid: Grid, mean: tuple, std: tuple) -> float:
    """Element `col` of patch row `row`, from the layout's definition, with explicit index arithmetic."""
    blocks_w = grid.w // 2
    t, rest = divmod(row, grid.h * grid.w)
    block, inner = divmod(rest, 4)
    block_row, block_col = divmod(block, blocks_w)
    in_row, in_col = divmod(inner, 2)
    c, rest = divmod(col, 2 * 16 * 16)
    tt, rest = divmod(rest, 16 * 16)
    ph, pw = divmod(rest, 16)
    frame = min(2 * t + tt, frames.shape[0] - 1)  # odd counts repeat the last frame
    y, x = (2 * block_row + in_row) * 16 + ph, (2 * block_col + in_col) * 16 + pw
    return (float(frames[frame, y, x, c]) / 255 - mean[c]) / std[c]


@pytest.mark.parametrize("num_frames", [1, 3, 4])
def test_row_layout(num_frames: int) -> None:
    gen = torch.Generator().manual_seed(num_frames)
    frames = torch.randint(0, 256, (num_frames, 64, 96, 3), dtype=torch.uint8, generator=gen)
    pre = VisionPreprocessor(CFG, "cpu")
    rows, grid = pre.image(frames) if num_frames == 1 else pre.video(frames)
    assert grid == Grid((num_frames + 1) // 2, 4, 6) and rows.shape == (grid.num_patches, 1536)
    picks = torch.randint(0, rows.shape[0], (200,), generator=gen).tolist()
    cols = torch.randint(0, 1536, (200,), generator=gen).tolist()
    mean, std = (CFG.image_mean, CFG.image_std) if num_frames == 1 else (CFG.video_mean, CFG.video_std)
    for r, c in zip(picks, cols):
        assert rows[r, c].item() == pytest.approx(expected_value(frames, r, c, grid, mean, std), abs=1e-6)


def test_image_is_duplicated_along_time() -> None:
    frames = torch.randint(0, 256, (1, 32, 32, 3), dtype=torch.uint8)
    rows, _ = VisionPreprocessor(CFG, "cpu").image(frames[0])  # [H, W, 3] is accepted too
    per_t = rows.view(4, 3, 2, 256)
    torch.testing.assert_close(per_t[:, :, 0], per_t[:, :, 1], rtol=0, atol=0)


def test_batch_concatenates_in_order() -> None:
    pre = VisionPreprocessor(CFG, "cpu")
    image = torch.randint(0, 256, (1, 32, 64, 3), dtype=torch.uint8)
    video = torch.randint(0, 256, (4, 64, 32, 3), dtype=torch.uint8)
    rows, grids = pre.batch([MediaFrames(MediaKind.IMAGE, image), MediaFrames(MediaKind.VIDEO, video)])
    assert grids == [Grid(1, 2, 4), Grid(2, 4, 2)]
    torch.testing.assert_close(rows[:8], pre.image(image)[0], rtol=0, atol=0)
    torch.testing.assert_close(rows[8:], pre.video(video)[0], rtol=0, atol=0)


@pytest.mark.parametrize(
    "frames,needle",
    [
        (torch.zeros(1, 32, 32, 3, dtype=torch.float32), "uint8"),
        (torch.zeros(1, 32, 32, 4, dtype=torch.uint8), "uint8"),
        (torch.zeros(1, 48, 32, 3, dtype=torch.uint8), "multiples of 32"),
        (torch.zeros(0, 32, 32, 3, dtype=torch.uint8), "at least one frame"),
    ],
)
def test_bad_frames(frames: torch.Tensor, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        VisionPreprocessor(CFG, "cpu").video(frames)


def test_image_with_two_frames_and_empty_batch() -> None:
    pre = VisionPreprocessor(CFG, "cpu")
    with pytest.raises(ValueError, match="one frame"):
        pre.image(torch.zeros(2, 32, 32, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="empty"):
        pre.batch([])
