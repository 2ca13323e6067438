"""The vision tower's 2-D ("axial") rotary angles: half the frequencies follow the patch row, half the column.

`runtime.kernels.vision_rotary` applies them to q and k.
"""
from __future__ import annotations

import torch


def inv_frequencies(head_dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """[head_dim // 4] float32: one frequency set shared by the row axis and the column axis."""
    axis_dim = head_dim // 2
    return 1.0 / (theta ** (torch.arange(0, axis_dim, 2, dtype=torch.float32, device=device) / axis_dim))


def rotary_cos_sin(coords: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [M, head_dim] float32 for (row, col) coords [M, 2], laid out [row·f, col·f, row·f, col·f]."""
    angles = coords.to(torch.float32)[:, :, None] * inv_freq  # [M, 2, head_dim // 4]
    angles = angles.flatten(1)  # [M, head_dim // 2]: row freqs then col freqs
    angles = torch.cat([angles, angles], dim=-1)  # [M, head_dim]
    return angles.cos(), angles.sin()

