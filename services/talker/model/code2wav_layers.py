"""Code2Wav's convolution stack on time-major `(B, T, C)` activations: causal (transposed) convs, ConvNeXt, SnakeBeta.

Time-major keeps channels innermost from the pre-transformer to the waveform: cuDNN's tensor-core convs read
that layout as NHWC directly (no transposes around each call), transposed convs become plain GEMMs, and the
per-channel activations and norms act on the last dimension. Parameter names and shapes are the checkpoint's.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.code2wav_snake import snake


def _store_time_major(param: nn.Parameter) -> None:
    """Keep a `(A, B, K)` conv weight's shape but store it `(A, K, B)`: the layout the time-major calls read in place.

    Loading a checkpoint copies into the parameter and casts preserve strides, so the layout survives both.
    """
    param.data = param.data.transpose(1, 2).contiguous().transpose(1, 2)


class _Derived:
    """A tensor computed from parameters, recomputed only when one of them is replaced or modified in place."""

    def __init__(self) -> None:
        self.key: tuple[int, ...] = ()
        self.value: tuple[torch.Tensor, ...] = ()

    def get(
        self, params: tuple[torch.Tensor, ...], make: Callable[[], tuple[torch.Tensor, ...]]
    ) -> tuple[torch.Tensor, ...]:
        key = tuple(v for p in params for v in (p.data_ptr(), p._version))
        if key != self.key:
            self.key, self.value = key, make()
        return self.value


def conv_time_major(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int = 1,
                    groups: int = 1) -> torch.Tensor:  # fmt: skip
    """Valid (unpadded) conv of x `(B, T, C_in)` with a Conv1d weight `(C_out, C_in/groups, K)` -> `(B, T', C_out)`."""
    if weight.shape[2] == 1 and groups == 1:
        return F.linear(x, weight[:, :, 0], bias)  # a 1x1 conv is a GEMM over channels
    # (B, T, C) -> (B, C, 1, T) and (C_out, C_in, K) -> (C_out, C_in, 1, K): channels-last views, no copies
    x4 = x.unsqueeze(1).permute(0, 3, 1, 2)
    y = F.conv2d(x4, weight.unsqueeze(2), bias, dilation=(1, dilation), groups=groups)
    return y.permute(0, 2, 3, 1).squeeze(1)  # (B, C_out, 1, T') -> (B, T', C_out)


class CausalConv(nn.Module):
    """Stride-1 Conv1d padded on the left only, so output t sees inputs <= t."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        _store_time_major(self.conv.weight)
        self.left = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor, padded: bool = False) -> torch.Tensor:
        """x `(B, T, C_in)` -> `(B, T, C_out)`; `padded`: x already starts with `left` zero rows (fused upstream)."""
        if not padded and self.left:
            x = F.pad(x, (0, 0, self.left, 0))
        return conv_time_major(x, self.conv.weight, self.conv.bias, self.conv.dilation[0], self.conv.groups)


class CausalTransConv(nn.Module):
    """ConvTranspose1d (kernel = m * stride) trimmed by kernel-stride at both ends: L inputs -> (L-m+1)*stride.

    Output block u (`stride` samples) is sum_i x[u - i] @ W[:, :, i*stride : (i+1)*stride], so the whole layer
    is one GEMM of the m shifted inputs, side by side, against the weight regrouped once (cached).
    """

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        if kernel % stride:
            raise ValueError(f"CausalTransConv kernel={kernel}, stride={stride}: kernel must be a multiple of stride")
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.stride, self.taps = stride, kernel // stride
        self._gemm = _Derived()

    def gemm_weight(self) -> tuple[torch.Tensor, ...]:
        """(weight `(stride*C_out, taps*C_in)`, bias `(stride*C_out,)`): output (j, c_out) from input (i, c_in)."""
        w, b = self.conv.weight, self.conv.bias

        def make() -> tuple[torch.Tensor, ...]:
            c_in, c_out, _ = w.shape
            # w[c_in, c_out, i*stride + j] -> [j, c_out, i, c_in]
            grouped = w.detach().view(c_in, c_out, self.taps, self.stride).permute(3, 1, 2, 0)
            return grouped.reshape(self.stride * c_out, self.taps * c_in), b.detach().repeat(self.stride)

        return self._gemm.get((w, b), make)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `(B, L, C_in)` -> `(B, (L - taps + 1) * stride, C_out)`."""
        weight, bias = self.gemm_weight()
        length, m = x.shape[1], self.taps
        # taps side by side: row u holds x[u + m-1], x[u + m-2], ..., x[u]  -> (B, L-m+1, m*C_in)
        stacked = x if m == 1 else torch.cat([x[:, m - 1 - i : length - i] for i in range(m)], dim=-1)
        y = F.linear(stacked, weight, bias)  # (B, L-m+1, stride*C_out)
        return y.view(x.shape[0], -1, self.conv.out_channels)


class ConvNeXt(nn.Module):
    """Causal depthwise conv k7 -> LayerNorm -> 4x MLP (GELU) -> per-channel gamma, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `(B, T, C)` -> `(B, T, C)`."""
        return x + self.gamma * self.pwconv2(F.gelu(self.pwconv1(self.norm(self.dwconv(x)))))


class SnakeBeta(nn.Module):
    """x + sin^2(x * e^alpha) / (e^beta + 1e-9), per channel, log-parametrised."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self._coefs = _Derived()

    def coefficients(self) -> tuple[torch.Tensor, ...]:
        """(e^alpha, 1 / (e^beta + 1e-9)) in fp32, computed once per weight load rather than on every call."""
        alpha, beta = self.alpha, self.beta
        return self._coefs.get((alpha, beta), lambda: (alpha.detach().float().exp(),
                                                        1.0 / (beta.detach().float().exp() + 1e-9)))  # fmt: skip

    def forward(self, x: torch.Tensor, left_pad: int = 0) -> torch.Tensor:
        """x `(B, T, C)` -> `(B, left_pad + T, C)`: `left_pad` zero rows first, for a causal conv that follows."""
        a, inv_b = self.coefficients()
        return snake(x, a, inv_b, left_pad)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(self.act1(x, self.conv1.left), padded=True)
        return x + self.conv2(self.act2(h))


class DecoderBlock(nn.Module):
    """SnakeBeta -> CausalTransConv(k=2r, s=r) -> residual units at dilations 1, 3, 9 (`block.0` .. `block.4`)."""

    def __init__(self, c_in: int, c_out: int, rate: int) -> None:
        super().__init__()
        units: list[nn.Module] = [SnakeBeta(c_in), CausalTransConv(c_in, c_out, 2 * rate, rate)]
        units += [ResidualUnit(c_out, d) for d in (1, 3, 9)]
        self.block = nn.ModuleList(units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.block:
            x = unit(x)
        return x
