"""Code2Wav's parts: sliding-window pre-transformer, causal (transposed) convolutions, ConvNeXt, SnakeBeta decoder."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.config import Code2WavConfig
from services.talker.model.layers import RMSNorm, SwiGLU, apply_rope, attend, inv_frequencies, rope_cos_sin


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class WindowAttention(nn.Module):
    """Causal attention over the last `sliding_window` positions (self included), no q/k norm."""

    def __init__(self, cfg: Code2WavConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x `(B, n, dim)`; cos/sin cover past + new positions; returns (out, raw keys/values past + new)."""
        b, t, _ = x.shape
        # (B, n, heads*D) -> (B, heads, n, D)
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        cos, sin = cos_sin
        q, k_rot = apply_rope(q, cos[:, -t:], sin[:, -t:]), apply_rope(k, cos, sin)
        return self.o_proj(attend(q, k_rot, v, mask).transpose(1, 2).reshape(b, t, -1)), (k, v)


class PreTransformerLayer(nn.Module):
    def __init__(self, cfg: Code2WavConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = WindowAttention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)


# Per layer: raw (un-rotated) keys and values of the last `window - 1` positions, `(B, KVH, P, D)` each.
WindowCache = list[tuple[torch.Tensor, torch.Tensor]]


class PreTransformer(nn.Module):
    def __init__(self, cfg: Code2WavConfig) -> None:
        super().__init__()
        self.window = cfg.sliding_window
        self.layers = nn.ModuleList(PreTransformerLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer("inv_freq", inv_frequencies(cfg.head_dim, cfg.rope_theta), persistent=False)

    def forward(self, x: torch.Tensor, past: WindowCache | None = None) -> tuple[torch.Tensor, WindowCache]:
        """x `(B, n, dim)` new frames after the P frames whose keys/values `past` holds -> (out, new cache).

        Positions are re-based to 0..P+n-1 on every call: RoPE only sees offsets, and keeping keys
        un-rotated lets streams at different absolute positions share one batched call.
        """
        n = x.shape[1]
        p = past[0][0].shape[2] if past else 0
        pos = torch.arange(p + n, device=x.device)
        cos, sin = rope_cos_sin(pos[None], self.inv_freq, x.dtype)
        delta = pos[p:, None] - pos[None, :]  # query - key, (n, P+n)
        mask = ((delta >= 0) & (delta < self.window))[None, None]
        new_past: WindowCache = []
        for i, layer in enumerate(self.layers):
            h, kv = layer.self_attn(layer.input_layernorm(x), (cos, sin), mask, past[i] if past else None)
            x = x + layer.self_attn_layer_scale(h)
            x = x + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(x)))
            new_past.append((kv[0][:, :, -(self.window - 1) :], kv[1][:, :, -(self.window - 1) :]))
        return self.norm(x), new_past


class CausalConv(nn.Module):
    """Conv1d padded on the left only, so output t sees inputs <= t (plus right padding to finish the last stride)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, stride: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride=stride, dilation=dilation, groups=groups)
        self.span = (kernel - 1) * dilation + 1
        self.stride = stride
        self.left = self.span - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = -(-(length - self.span + self.left) // self.stride) + 1  # ceil division
        right = (frames - 1) * self.stride + self.span - self.left - length
        return self.conv(F.pad(x, (self.left, right)))


class CausalTransConv(nn.Module):
    """ConvTranspose1d trimmed by kernel-stride at both ends: L inputs -> (L-1)*stride + 2*stride - kernel outputs."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
        h = self.dwconv(x).transpose(1, 2)  # (B, C, T) -> (B, T, C) for the channel-last norm and MLP
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + h.transpose(1, 2)


class SnakeBeta(nn.Module):
    """x + sin^2(x * e^alpha) / (e^beta + 1e-9), per channel, log-parametrised."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.exp()[None, :, None]  # (1, C, 1) against x (B, C, T)
        beta = self.beta.exp()[None, :, None]
        return x + (1.0 / (beta + 1e-9)) * torch.sin(x * alpha).pow(2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


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

