"""Interleaved multimodal RoPE (M-RoPE): each rotary frequency takes its angle from the t, h or w position axis."""
from __future__ import annotations

import torch
from torch import nn

T_AXIS, H_AXIS, W_AXIS = 0, 1, 2


def frequency_axes(mrope_section: tuple[int, int, int], num_freqs: int | None = None) -> torch.Tensor:
    """Which position axis drives each of the rotary frequencies: [num_freqs] int64 in {0, 1, 2}.

    Frequencies cycle t, h, w while the h and w sections last (3 * section entries each); every other one is t.
    num_freqs defaults to the section's sum; Qwen3.5's sections may overrun a smaller rotary dim (cut there).
    """
    num_freqs = sum(mrope_section) if num_freqs is None else num_freqs
    axes = torch.full((num_freqs,), T_AXIS, dtype=torch.long, device="cpu")
    for axis in (H_AXIS, W_AXIS):
        axes[axis:3 * mrope_section[axis]:3] = axis
    return axes


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D]; cos, sin: [T, D]."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


class MRoPE(nn.Module):
    """cos/sin tables for packed tokens from their (t, h, w) positions."""

    def __init__(self, head_dim: int, theta: float, mrope_section: tuple[int, int, int]) -> None:
        super().__init__()
        # Built on the host in fp32 whatever the default device, so every device gets the same frequencies.
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim
        self.register_buffer("inv_freq", 1.0 / (theta ** exponents), persistent=False)  # [D/2]
        self.register_buffer("axes", frequency_axes(mrope_section, head_dim // 2), persistent=False)  # [D/2]

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [3, T] (t, h, w) -> cos, sin: [T, D] in `dtype`; angles are computed in fp32."""
        pos = positions.to(torch.float32)[self.axes]  # [D/2, T]: the axis each frequency reads
        angles = pos.transpose(0, 1) * self.inv_freq  # [T, D/2]
        angles = torch.cat((angles, angles), dim=-1)  # [T, D]
        return angles.cos().to(dtype), angles.sin().to(dtype)
