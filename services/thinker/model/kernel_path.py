"""When the Thinker takes the runtime.kernels path, and its paged-attention backend over those kernels."""
from __future__ import annotations

import torch

from runtime.attention import AttentionContext, write_kv
from runtime.kernels import paged_attention as kernel_paged_attention
from runtime.kernels._backend import TRITON_DTYPES, triton_importable


def kernels_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    """CUDA in bf16/fp16 with Triton importable; CPU and fp32 keep the exact reference path."""
    return torch.device(device).type == "cuda" and dtype in TRITON_DTYPES and triton_importable()


def kernel_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext, scale: float
) -> torch.Tensor:
    """The AttentionBackend contract over runtime.kernels: write k/v at their slots, then paged attention.

    Reads only ctx's device tensors and the static host query lengths (for the grid), so it can be captured in a
    CUDA graph; on CPU the kernels package falls back to its PyTorch reference. The Thinker's own layers skip the
    write here: their q/k norm + rope kernel stores k/v and they call `kernel_attention_cached`.
    """
    write_kv(kv_cache, k, v, ctx.slot_mapping)
    return kernel_attention_cached(q, kv_cache, ctx, scale)


def kernel_attention_cached(
    q: torch.Tensor, kv_cache: torch.Tensor, ctx: AttentionContext, scale: float
) -> torch.Tensor:
    """Paged attention of q [T, Hq, D] over the cache, this step's k/v already stored in it -> [T, Hq, D]."""
    max_q = max(ctx.q_lens_host, default=1)
    return kernel_paged_attention(q.contiguous(), kv_cache, ctx.block_tables, ctx.kv_lens, ctx.cu_seqlens_q,
                                  max_q, scale)
