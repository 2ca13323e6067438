"""Bidirectional attention inside each window of the packed AuT tokens: varlen flash on CUDA, padded SDPA elsewhere."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from services.audio.model.plan import AudioBatchPlan

# qkv [N, 3, H, D] -> attention output [N, H * D]
WindowAttention = Callable[[torch.Tensor, AudioBatchPlan, float], torch.Tensor]
BACKENDS = ("auto", "varlen", "padded")


def padded_window_attention(qkv: torch.Tensor, plan: AudioBatchPlan, scale: float) -> torch.Tensor:
    """Exact reference: gather the windows into a padded batch, SDPA with a key mask, scatter back."""
    num_tokens, _, heads, head_dim = qkv.shape
    windows = qkv.index_select(0, plan.window_index.reshape(-1))  # [W * L, 3, H, D]
    windows = windows.view(plan.num_windows, plan.max_window, 3, heads, head_dim)  # [W, L, 3, H, D]
    windows = windows.permute(2, 0, 3, 1, 4)  # [3, W, H, L, D]
    q, k, v = windows.unbind(0)
    mask = None if plan.window_valid is None else plan.window_valid[:, None, None, :]  # [W, 1, 1, L]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)  # [W, H, L, D]
    out = out.transpose(1, 2).reshape(plan.num_windows * plan.max_window, heads * head_dim)  # [W * L, H * D]
    return out.index_select(0, plan.token_slot)  # [N, H * D]


def varlen_window_attention(qkv: torch.Tensor, plan: AudioBatchPlan, scale: float) -> torch.Tensor:
    """Flash varlen over `cu_seqlens` straight on the packed tokens (CUDA, fp16/bf16); no padding, no gather.

    Calls the aten op that `torch.nn.attention.varlen.varlen_attn` wraps: the wrapper is a Python custom op (host
    time on every one of the 32 layers) and launches an extra fill for an rng state this forward never reads."""
    num_tokens, _, heads, head_dim = qkv.shape
    q, k, v = qkv.unbind(1)  # each [N, H, D], rows strided, last dim contiguous as flash requires
    out = torch.ops.aten._flash_attention_forward(
        q, k, v, plan.cu_seqlens, plan.cu_seqlens, plan.max_window, plan.max_window, 0.0, False, False, scale=scale,
    )[0]  # [N, H, D]
    return out.reshape(num_tokens, heads * head_dim)


def varlen_available(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        return False
    return hasattr(torch.ops.aten, "_flash_attention_forward") and torch.backends.cuda.is_flash_attention_available()


def select_attention(backend: str, device: torch.device, dtype: torch.dtype) -> WindowAttention:
    """`auto`: varlen flash where it runs (CUDA, half precision), else padded SDPA."""
    if backend not in BACKENDS:
        raise ValueError(f"attention backend {backend!r} is unknown: use one of {BACKENDS}")
    if backend == "varlen" and not varlen_available(device, dtype):
        raise ValueError(f"attention backend 'varlen' needs CUDA, fp16/bf16 and torch's flash attention; "
                         f"got {device}, {dtype}: use 'padded' or 'auto'")
    if backend == "varlen" or (backend == "auto" and varlen_available(device, dtype)):
        return varlen_window_attention
    return padded_window_attention
