"""Code2Wav's pre-transformer: causal sliding-window attention layers, with a cache of the window for streaming."""
from __future__ import annotations

import torch
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


class PreTransformer(nn.Module):
    """The window cache is one tensor `(layers, 2, B, KVH, P, D)`: raw (un-rotated) keys [.., 0] and values [.., 1]
    of the P positions before the new frames, so a batch of streams gathers and splits it in one op each."""

    def __init__(self, cfg: Code2WavConfig) -> None:
        super().__init__()
        self.window = cfg.sliding_window
        self.layers = nn.ModuleList(PreTransformerLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer("inv_freq", inv_frequencies(cfg.head_dim, cfg.rope_theta), persistent=False)

    def forward(
        self, x: torch.Tensor, past: torch.Tensor | None = None, past_valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x `(B, n, dim)` new frames after the P cached positions -> (out, cache of the last `window - 1` positions).

        `past_valid` `(B, P)` bool marks the cached positions that hold real frames; the others (a stream's
        start, padded to a fixed P) are masked out. Positions are re-based to 0..P+n-1 on every call: RoPE
        only sees offsets, and keeping keys un-rotated lets streams at different absolute positions batch.
        """
        b, n, _ = x.shape
        p = 0 if past is None else past.shape[4]
        pos = torch.arange(p + n, device=x.device)
        cos, sin = rope_cos_sin(pos[None], self.inv_freq, x.dtype)
        delta = pos[p:, None] - pos[None, :]  # query - key, (n, P+n)
        mask = ((delta >= 0) & (delta < self.window))[None, None]
        if past_valid is not None:
            new_valid = torch.ones(b, n, dtype=torch.bool, device=x.device)
            mask = mask & torch.cat((past_valid, new_valid), dim=1)[:, None, None, :]  # (B, 1, n, P+n)
        kept = []
        for i, layer in enumerate(self.layers):
            layer_past = None if past is None else (past[i, 0], past[i, 1])
            h, (k, v) = layer.self_attn(layer.input_layernorm(x), (cos, sin), mask, layer_past)
            x = x + layer.self_attn_layer_scale(h)
            x = x + layer.mlp_layer_scale(layer.mlp(layer.post_attention_layernorm(x)))
            kept += [k[:, :, -(self.window - 1) :], v[:, :, -(self.window - 1) :]]
        new_past = torch.stack(kept).unflatten(0, (len(self.layers), 2))  # (layers, 2, B, KVH, <= window-1, D)
        return self.norm(x), new_past
