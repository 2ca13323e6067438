"""When the Thinker takes the runtime.kernels path, and its paged-attention backend over those kernels."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from runtime.attention import AttentionContext, write_kv
from runtime.kernels import paged_attention as kernel_paged_attention
from runtime.kernels._backend import TRITON_DTYPES, triton_importable


def kernels_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    """CUDA in bf16/fp16 with Triton importable; CPU and fp32 keep the exact reference path."""
    return torch.device(device).type == "cuda" and dtype in TRITON_DTYPES and triton_importable()


Model = TypeVar("Model", bound=nn.Module)


def build_from_state(make: Callable[[], Model], state: dict[str, torch.Tensor], device: torch.device | str,
                     use_kernels: bool | None, dtype: torch.dtype | None = None) -> Model:
    """`make()`'s parameters created on the meta device and replaced by `state`'s tensors (so weights exist once),
    moved to `device` (which also moves buffers built on the host, such as rope tables) for inference; then the
    kernel path (`enable_kernels()`) where `use_kernels` says, or, when it is None, where kernels_available allows
    for `dtype` (default: the LM head's)."""
    with torch.device("meta"):
        model = make()
    model.load_state_dict(state, strict=True, assign=True)
    model = model.to(device).eval().requires_grad_(False)
    if use_kernels is None:
        head: Any = model.lm_head  # type: ignore[union-attr]
        use_kernels = kernels_available(device, dtype or head.weight.dtype)
    if use_kernels:
        model.enable_kernels()  # type: ignore[operator]
    return model


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
