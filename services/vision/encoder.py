"""`VisionEncoder`: uint8 frames of many items -> one preprocessing pass and one tower forward -> per-item outputs."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from services.vision.model import Grid, VisionOutput, VisionTower
from services.vision.preprocess import MediaFrames, MediaKind, VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig


class VisionEncoder:
    """The vision stage's domain object: what the servicer calls once per batch."""

    def __init__(self, tower: VisionTower, preprocessor: VisionPreprocessor) -> None:
        self.tower = tower
        self.preprocessor = preprocessor

    @classmethod
    def load(
        cls, ckpt_dir: Path, device: torch.device | str, dtype: torch.dtype, attention: str = "auto",
        linear_dtype: str = "native",
    ) -> VisionEncoder:
        """linear_dtype: the tower's block linears, "native" (in `dtype`) or "fp8" (see `VisionTower.load`)."""
        tower = VisionTower.load(Path(ckpt_dir), device, dtype, attention=attention, linear_dtype=linear_dtype)
        processing = VisionProcessingConfig.from_checkpoint(Path(ckpt_dir))
        return cls(tower, VisionPreprocessor(processing, tower.device))

    @property
    def processing(self) -> VisionProcessingConfig:
        return self.preprocessor.cfg

    def grid_of(self, item: MediaFrames) -> Grid:
        """The grid an item will have, from its frame shape alone (for batching budgets and token counts)."""
        cfg = self.processing
        frames = item.frames if item.frames.dim() == 4 else item.frames.unsqueeze(0)  # [F, H, W, 3]
        num_frames, height, width, _ = frames.shape
        t = 1 if item.kind is MediaKind.IMAGE else -(-num_frames // cfg.temporal_patch_size)
        return Grid(t, height // cfg.patch_size, width // cfg.patch_size)

    def encode(self, items: Sequence[MediaFrames]) -> list[VisionOutput]:
        """One output per item, in order, on the tower's device; [tokens, out] rows each."""
        patches, grids = self.preprocessor.batch(items)
        return self.tower(patches, grids).split(grids, self.tower.cfg.spatial_merge_size)
