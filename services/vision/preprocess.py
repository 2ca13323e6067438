"""uint8 RGB frames -> normalised patch rows in the reference `pixel_values` order, computed on the tower's device.

Row layout: each row is one patch flattened as (C, T, ph, pw); rows run (t, block_row, block_col, in_row, in_col),
so every 2×2 merge block is 4 consecutive rows. Frames arrive already resized to multiples of patch·merge pixels.
"""
from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import NamedTuple

import torch

from runtime.transfer import to_device
from runtime.vision_processing import VisionProcessingConfig
from services.vision.model.grid import Grid


class MediaKind(Enum):
    IMAGE = "image"
    VIDEO = "video"


class MediaFrames(NamedTuple):
    """One item to encode: uint8 frames [F, H, W, 3] (F == 1 for an image)."""

    kind: MediaKind
    frames: torch.Tensor


def normalisation_table(
    mean: Sequence[float], std: Sequence[float], rescale: float, device: torch.device
) -> torch.Tensor:
    """[256·3] float32: the normalised value of every (uint8 value, channel), flattened value-major.

    Rescaling in float64 and rounding once to float32 before normalising in float32 is the reference's
    arithmetic, so a table lookup gives its values bit for bit.
    """
    scaled = (torch.arange(256, dtype=torch.float64) * rescale).to(torch.float32)  # [256]
    mean_t = torch.tensor(mean, dtype=torch.float32)
    std_t = torch.tensor(std, dtype=torch.float32)
    return ((scaled[:, None] - mean_t) / std_t).flatten().to(device)  # [256·3]


def check_frames(frames: torch.Tensor, factor: int) -> None:
    if frames.dtype != torch.uint8 or frames.dim() != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [F, H, W, 3], got {frames.dtype} {tuple(frames.shape)}")
    num_frames, height, width, _ = frames.shape
    if num_frames < 1 or height < factor or width < factor or height % factor or width % factor:
        raise ValueError(
            f"frames {tuple(frames.shape)}: need at least one frame and H, W positive multiples of {factor}; "
            "resize with smart_resize first"
        )


def patchify(frames: torch.Tensor, table: torch.Tensor, cfg: VisionProcessingConfig) -> tuple[torch.Tensor, Grid]:
    """Normalised patch rows [t·h·w, C·T·P·P] float32 and the grid of one item, on `table`'s device."""
    check_frames(frames, cfg.factor)
    frames = to_device(frames, table.device)
    temporal, patch, merge = cfg.temporal_patch_size, cfg.patch_size, cfg.merge_size
    # Frame counts that are not a multiple of T repeat the last frame (the reference video processor's rule);
    # a single image frame is thereby duplicated along T, as the image processor does.
    pad = -frames.shape[0] % temporal
    if pad:
        frames = torch.cat([frames, frames[-1:].expand(pad, -1, -1, -1)])
    num_frames, height, width, channels = frames.shape
    grid = Grid(num_frames // temporal, height // patch, width // patch)
    index = frames.to(torch.int32) * channels + torch.arange(channels, dtype=torch.int32, device=frames.device)
    pixels = table.index_select(0, index.flatten()).view(num_frames, height, width, channels)  # normalised
    pixels = pixels.view(
        grid.t, temporal, grid.h // merge, merge, patch, grid.w // merge, merge, patch, channels
    )  # [gt, T, bh, mh, ph, bw, mw, pw, C]
    pixels = pixels.permute(0, 2, 5, 3, 6, 8, 1, 4, 7)  # [gt, bh, bw, mh, mw, C, T, ph, pw]
    return pixels.reshape(grid.num_patches, channels * temporal * patch * patch), grid


class VisionPreprocessor:
    """Patchifies and normalises images and videos with the checkpoint's mean/std, on one device."""

    def __init__(self, cfg: VisionProcessingConfig, device: torch.device | str) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.tables = {
            MediaKind.IMAGE: normalisation_table(cfg.image_mean, cfg.image_std, cfg.rescale_factor, self.device),
            MediaKind.VIDEO: normalisation_table(cfg.video_mean, cfg.video_std, cfg.rescale_factor, self.device),
        }

    def image(self, frames: torch.Tensor) -> tuple[torch.Tensor, Grid]:
        """One image [1, H, W, 3] (or [H, W, 3]) -> rows [h·w, C·T·P·P] and Grid(1, h, w)."""
        if frames.dim() == 3:
            frames = frames.unsqueeze(0)
        if frames.shape[0] != 1:
            raise ValueError(f"an image has one frame, got {frames.shape[0]}; send several frames as a video")
        return patchify(frames, self.tables[MediaKind.IMAGE], self.cfg)

    def video(self, frames: torch.Tensor) -> tuple[torch.Tensor, Grid]:
        """Sampled frames [F, H, W, 3] -> rows [t·h·w, C·T·P·P] and Grid(ceil(F / T), h, w)."""
        return patchify(frames, self.tables[MediaKind.VIDEO], self.cfg)

    def batch(self, items: Sequence[MediaFrames]) -> tuple[torch.Tensor, list[Grid]]:
        """Rows of all items concatenated in order, ready for one tower forward, and their grids."""
        if not items:
            raise ValueError("items is empty; pass at least one image or video")
        rows, grids = [], []
        for item in items:
            patches, grid = self.image(item.frames) if item.kind is MediaKind.IMAGE else self.video(item.frames)
            rows.append(patches)
            grids.append(grid)
        return torch.cat(rows) if len(rows) > 1 else rows[0], grids
