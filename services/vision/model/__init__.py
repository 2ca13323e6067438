"""The Qwen3-Omni vision tower in our own code: `VisionTower.load(ckpt_dir, device, dtype)`, then `forward`."""
from __future__ import annotations

from services.vision.model.config import VisionTowerConfig
from services.vision.model.grid import Grid
from services.vision.model.tower import VisionOutput, VisionTower

__all__ = ["Grid", "VisionOutput", "VisionTower", "VisionTowerConfig"]
