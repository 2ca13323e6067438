"""Small building blocks shared by the talker's three networks: SwiGLU, rotary embeddings, GQA attention."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runtime.layers.rms_norm import RMSNorm  # re-exported: the talker's networks import it from here


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class QKNormAttention(nn.Module):
    """GQA projections with per-head RMSNorm on q and k before the rotation (talker and code predictor alike);
    subclasses own the KV cache and the output projection's use."""

    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def project(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, hidden) -> rotated q (B, H, T, D), rotated k and v (B, KVH, T, D)."""
        b, t, _ = x.shape
        # (B, T, heads*D) -> (B, heads, T, D); the q/k norms act per head before the rotation
        q = self.q_norm(self.q_proj(x).view(b, t, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(q, *cos_sin), apply_rope(k, *cos_sin), v

    def output(self, attended: torch.Tensor) -> torch.Tensor:
        """attended (B, H, T, D) -> (B, T, hidden)."""
        b, _, t, _ = attended.shape
        return self.o_proj(attended.transpose(1, 2).reshape(b, t, -1))


def inv_frequencies(head_dim: int, theta: float, device: torch.device | None = None) -> torch.Tensor:
    """The head_dim/2 rotary frequencies 1/theta^(2i/d), fp32."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin over the full head for 1-D positions `(...)` -> `(..., head_dim)` each, halves repeated."""
    freqs = positions.float()[..., None] * inv_freq  # (..., head_dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def mrope_axis_of_frequency(mrope_section: tuple[int, int, int], num_freqs: int) -> torch.Tensor:
    """Which M-RoPE axis (0=t, 1=h, 2=w) drives each frequency: interleaved t,h,w,t,h,w..., leftovers to t."""
    axis = torch.zeros(num_freqs, dtype=torch.long)
    for a in (1, 2):
        axis[a : 3 * mrope_section[a] : 3] = a
    return axis


def mrope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, freq_axis: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for 3-axis positions `(3, ...)` -> `(..., head_dim)`: each frequency reads its own axis' position."""
    # positions: (3, ...) -> per-frequency position (..., head_dim/2)
    per_freq = positions.float().movedim(0, -1)[..., freq_axis.to(positions.device)]
    freqs = per_freq * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE; x `(B, heads, T, D)`, cos/sin `(B, T, D)`."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool = False
) -> torch.Tensor:
    """SDPA with grouped KV heads; q `(B, H, T, D)`, k/v `(B, KVH, S, D)`, bool mask `(B, 1, T, S)` (True = attend)."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        # k/v: (B, KVH, S, D) -> (B, H, S, D), each kv head serving `groups` query heads in a row
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
