"""AuT conv stem: 100-frame mel chunks -> 3 stride-2 convs -> linear, plus sinusoidal positions restarting per chunk."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from services.audio.model.config import AudioEncoderConfig
from services.audio.model.plan import ConvLaunch

MAX_TIMESCALE = 10_000.0


def sinusoid_table(num_positions: int, channels: int) -> torch.Tensor:
    """[num_positions, channels] float32: [sin | cos] of position times geometric frequencies from 1 to 1e-4."""
    increment = math.log(MAX_TIMESCALE) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2).float())  # [C/2]
    angles = torch.arange(num_positions)[:, None] * inv_timescales[None, :]  # [P, C/2]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class ConvStem(nn.Module):
    def __init__(self, config: AudioEncoderConfig) -> None:
        super().__init__()
        channels = config.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, channels, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(channels, channels, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(channels, channels, 3, 2, padding=1)
        self.conv_out = nn.Linear(config.stem_features, config.d_model, bias=False)
        # Positions restart in every chunk, so only one chunk's worth of the table is ever read.
        self.register_buffer("positions", sinusoid_table(config.chunk_tokens, config.d_model), persistent=False)

    def forward(self, mel: torch.Tensor, launch: ConvLaunch) -> torch.Tensor:
        """mel: [mel_bins, total_frames + 1], the packed clips and a zero column. Returns [launch tokens, d_model]."""
        bins = mel.shape[0]
        x = mel.index_select(1, launch.frame_index)  # [M, K * P]
        x = x.view(bins, launch.num_chunks, launch.pad_frames).transpose(0, 1).unsqueeze(1)  # [K, 1, M, P]
        x = torch.ops.aten.gelu_(self.conv2d1(x))  # in place: the first conv output is the stem's largest tensor
        if launch.masks is not None:
            x = x * launch.masks[0].to(x.dtype)  # zero past a short clip's own length, as an unpadded conv would see
        x = torch.ops.aten.gelu_(self.conv2d2(x))
        if launch.masks is not None:
            x = x * launch.masks[1].to(x.dtype)
        x = F.gelu(self.conv2d3(x))  # [K, C, M/8, T']
        k, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(k, t, c * f))  # [K, T', d]
        x = x + self.positions[:t].to(x.dtype)
        x = x.reshape(k * t, -1)  # [K * T', d]
        return x if launch.token_index is None else x.index_select(0, launch.token_index)
