"""AuT conv stem: 100-frame mel chunks -> 3 stride-2 convs -> linear, plus sinusoidal positions restarting per chunk.

Laid out for tensor cores rather than as the checkpoint's NCHW (freq, time) convolutions: the stem runs on
(time, freq) images in channels-last memory, with weights transposed to match at load (`stem_weights`). The first
conv (one input channel) is one Triton pass with its bias, GELU and mask on CUDA (a GEMM over 3x3 patches padded to
16 taps elsewhere); the other two are cuDNN NHWC convolutions whose bias + GELU (+ mask) is one in-place pass; the
last conv's output, [chunk, time, freq, channel] in memory, feeds `conv_out` as one contiguous GEMM.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from runtime.kernels._backend import use_triton
from services.audio.model.config import AudioEncoderConfig
from services.audio.model.plan import ConvLaunch

MAX_TIMESCALE = 10_000.0
TAPS = 9  # 3x3 kernel
PADDED_TAPS = 16  # a GEMM's reduction dim must be a multiple of 8 bf16 for tensor cores


def sinusoid_table(num_positions: int, channels: int) -> torch.Tensor:
    """[num_positions, channels] float32: [sin | cos] of position times geometric frequencies from 1 to 1e-4."""
    increment = math.log(MAX_TIMESCALE) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2).float())  # [C/2]
    angles = torch.arange(num_positions)[:, None] * inv_timescales[None, :]  # [P, C/2]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


def stem_weights(tensors: dict[str, torch.Tensor], config: AudioEncoderConfig) -> dict[str, torch.Tensor]:
    """Checkpoint stem tensors (prefix `conv2d*`/`conv_out`) -> this module's layout: kernels transposed to
    (time, freq), conv2d1 as [channels, 16 taps], conv_out's input features reordered from (channel, freq) to
    (freq, channel)."""
    out = {name: t for name, t in tensors.items() if name.endswith(".bias")}
    conv1 = tensors["conv2d1.weight"][:, 0].transpose(1, 2).reshape(-1, TAPS)  # [C, 3 time * 3 freq]
    out["conv2d1.weight"] = F.pad(conv1, (0, PADDED_TAPS - TAPS))
    for name in ("conv2d2.weight", "conv2d3.weight"):
        out[name] = tensors[name].transpose(2, 3).contiguous(memory_format=torch.channels_last)
    d_model = config.d_model
    freq = config.stem_features // config.downsample_hidden_size
    conv_out = tensors["conv_out.weight"].view(d_model, config.downsample_hidden_size, freq)
    out["conv_out.weight"] = conv_out.transpose(1, 2).reshape(d_model, config.stem_features)
    return out


class ConvStem(nn.Module):
    def __init__(self, config: AudioEncoderConfig) -> None:
        super().__init__()
        channels = config.downsample_hidden_size
        self.conv2d1 = nn.Linear(PADDED_TAPS, channels)  # the 1-channel conv as a GEMM over 3x3 patches
        self.conv2d2 = nn.Conv2d(channels, channels, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(channels, channels, 3, 2, padding=1)
        self.conv_out = nn.Linear(config.stem_features, config.d_model, bias=False)
        # Positions restart in every chunk, so only one chunk's worth of the table is ever read.
        self.register_buffer("positions", sinusoid_table(config.chunk_tokens, config.d_model), persistent=False)

    def forward(self, mel: torch.Tensor, launch: ConvLaunch) -> torch.Tensor:
        """mel: [frames, mel_bins], the packed clips' frames and a zero row. Returns [launch.num_rows, d_model]."""
        k, p, bins = launch.num_chunks, launch.pad_frames, mel.shape[1]
        x = mel.index_select(0, launch.frame_index).view(k, p, bins)  # [K, P time, M freq]
        masks = launch.masks or (None, None)  # zero past a short clip's own length, as an unpadded conv would see
        x = conv1_gelu(F.pad(x, (1, 1, 1, 1)), self.conv2d1.weight, self.conv2d1.bias, masks[0])  # [K*T1*F1, C]
        x = x.view(k, -(-p // 2), -(-bins // 2), -1).permute(0, 3, 1, 2)  # [K, C, T1, F1], channels-last
        x = bias_gelu_(F.conv2d(x, self.conv2d2.weight, None, 2, 1), self.conv2d2.bias, masks[1])
        x = bias_gelu_(F.conv2d(x, self.conv2d3.weight, None, 2, 1), self.conv2d3.bias, None)  # [K, C, T3, F3]
        t3 = x.shape[2]
        x = self.conv_out(x.permute(0, 2, 3, 1).reshape(k * t3, -1))  # a view when channels-last: [K * T3, d]
        x = (x.view(k, t3, -1) + self.positions[:t3].to(x.dtype)).view(k * t3, -1)
        return x if launch.token_index is None else x.index_select(0, launch.token_index)


def conv1_gelu(padded: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               mask: torch.Tensor | None) -> torch.Tensor:
    """The first conv (1 input channel, stride 2) + bias, GELU, then the time mask [K, ceil(T/2)] if any.
    padded: [K, T + 2, F + 2] zero-bordered images; weight: [C, 16] taps. Returns [K * ceil(T/2) * ceil(F/2), C]."""
    if use_triton(padded, weight, bias):  # one pass writing the stem's largest tensor, instead of four
        from services.audio.model.stem_triton import conv1_gelu_triton  # imports triton

        return conv1_gelu_triton(padded, weight, bias, mask)
    return conv1_gelu_reference(padded, weight, bias, mask)


def conv1_gelu_reference(padded: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         mask: torch.Tensor | None) -> torch.Tensor:
    k, t2, f2 = padded.shape
    y = torch.ops.aten.gelu_(F.linear(conv1_patches(padded), weight, bias))  # [K * T1 * F1, C]
    if mask is None:
        return y
    t1 = (t2 - 1) // 2
    return (y.view(k, t1, -1) * mask.to(y.dtype)[:, :, None]).view(y.shape)


def bias_gelu_(x: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """In place on a conv output x [K, C, T, F] (channels-last): gelu(x + bias), times the time mask [K, T] if any.
    (cuDNN's own bias is a separate pass that PyTorch adds with a broadcast, unvectorised.)"""
    if use_triton(x, bias) and x.is_contiguous(memory_format=torch.channels_last):
        from services.audio.model.stem_triton import bias_gelu_triton  # imports triton

        return bias_gelu_triton(x, bias, mask)
    x = torch.ops.aten.gelu_(x.add_(bias[:, None, None]))
    return x if mask is None else x.mul_(mask.to(x.dtype)[:, None, :, None])


def conv1_patches(padded: torch.Tensor) -> torch.Tensor:
    """padded: [K, T + 2, F + 2] -> [K * ceil(T/2) * ceil(F/2), 16]: each stride-2 output position's 3x3 window,
    taps in (time, freq) order, zeros in the 7 padding taps."""
    k, t2, f2 = padded.shape
    t1, f1 = (t2 - 1) // 2, (f2 - 1) // 2
    row, col = padded.stride(1), padded.stride(2)
    windows = padded.as_strided((k, t1, f1, 3, 3), (padded.stride(0), 2 * row, 2 * col, row, col))
    patches = padded.new_zeros(k, t1, f1, PADDED_TAPS)
    patches[..., :TAPS].unflatten(-1, (3, 3)).copy_(windows)
    return patches.view(-1, PADDED_TAPS)
