"""Code2Wav's conv stack on channels-first `(B, C, T)` activations: causal (transposed) convs, ConvNeXt, SnakeBeta.

Channels-first is the checkpoint's Conv1d layout and the one cuDNN was measured fast on for these shapes: the
late decoder stages are 1-D convs over up to 68k samples per stream (kernel 7, dilations up to 9, 96-192
channels). Commit d53d307 ran them as channels-last conv2d with H=1 at the same memory traffic, and 25-frame
chunks got 7x slower on the H200. So the only custom piece here is SnakeBeta: one Triton pass (instead of five
elementwise ones) that also writes the next causal conv's left zero padding.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.code2wav_snake import snake


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


class CausalConv(nn.Module):
    """Stride-1 Conv1d padded on the left only, so output t sees inputs <= t."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.left = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor, padded: bool = False) -> torch.Tensor:
        """x `(B, C_in, T)` -> `(B, C_out, T)`; `padded`: x already starts with `left` zero columns (fused upstream)."""
        if not padded and self.left:
            x = F.pad(x, (self.left, 0))
        return self.conv(x)


class CausalTransConv(nn.Module):
    """ConvTranspose1d trimmed by kernel-stride at both ends: L inputs -> (L-1)*stride + 2*stride - kernel outputs."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `(B, C_in, L)` -> a view `(B, C_out, L')` of the untrimmed output (rows stride-uniform, see `snake`)."""
        y = self.conv(x)
        return y[..., self.trim : y.shape[-1] - self.trim]


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
        """x `(B, C, T)` -> `(B, C, T)`."""
        h = self.dwconv(x).transpose(1, 2)  # (B, C, T) -> (B, T, C) for the channel-last norm and MLP
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + h.transpose(1, 2)


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
        """x `(B, C, T)` -> `(B, C, left_pad + T)`: `left_pad` zero columns first, for a causal conv that follows."""
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
