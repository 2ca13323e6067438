"""One AuT transformer layer: pre-LN windowed self-attention and a GELU MLP, on packed tokens; each residual add is
fused with the LayerNorm that follows it (one Triton pass on CUDA)."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from runtime.kernels._backend import use_triton
from services.audio.model.attention import WindowAttention
from services.audio.model.config import AudioEncoderConfig
from services.audio.model.plan import AudioBatchPlan

FP16_CLAMP = torch.finfo(torch.float16).max - 1000  # keeps fp16 residuals finite, as the reference does


def activation(name: str) -> nn.Module:
    return nn.GELU() if name == "gelu" else nn.GELU(approximate="tanh")


class SelfAttention(nn.Module):
    """q, k and v fused into one projection (the checkpoint's three are concatenated at load)."""

    def __init__(self, config: AudioEncoderConfig) -> None:
        super().__init__()
        self.num_heads = config.encoder_attention_heads
        self.head_dim = config.head_dim
        self.scale = config.head_dim ** -0.5
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor, plan: AudioBatchPlan, attend: WindowAttention) -> torch.Tensor:
        qkv = self.qkv(x).view(x.shape[0], 3, self.num_heads, self.head_dim)  # [N, 3, H, D]
        return self.out_proj(attend(qkv, plan, self.scale))


class EncoderLayer(nn.Module):
    def __init__(self, config: AudioEncoderConfig) -> None:
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.self_attn = SelfAttention(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.d_model, config.encoder_ffn_dim)
        self.act = activation(config.activation_function)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, config.d_model)

    def forward(self, h: torch.Tensor, normed: torch.Tensor, plan: AudioBatchPlan, attend: WindowAttention,
                next_norm: nn.LayerNorm) -> NormedResidual:
        """h: [N, d_model] packed tokens of every clip, normed: self_attn_layer_norm(h). Returns the layer's
        output and `next_norm` of it (the next layer's first norm, or ln_post): each residual add is fused with
        the norm that reads it."""
        h, x = add_layernorm(self.self_attn(normed, plan, attend), h, self.final_layer_norm)
        # fp16 residuals are clamped after the MLP add only, as the reference does
        clamp = FP16_CLAMP if h.dtype == torch.float16 else None
        return add_layernorm(self.fc2(self.act(self.fc1(x))), h, next_norm, clamp)


class NormedResidual(NamedTuple):
    residual: torch.Tensor
    normed: torch.Tensor


def add_layernorm(x: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm,
                  clamp: float | None = None) -> NormedResidual:
    """h = residual + x (clamped to +-clamp if given), and norm(h)."""
    if use_triton(x, residual, norm.weight, norm.bias) and x.dim() == 2:  # one pass instead of two
        from services.audio.model.norm_triton import add_layernorm_triton  # imports triton

        return NormedResidual(*add_layernorm_triton(x, residual, norm.weight, norm.bias, norm.eps, clamp))
    h = residual + x
    if clamp is not None:
        h = h.clamp(-clamp, clamp)
    return NormedResidual(h, norm(h))
