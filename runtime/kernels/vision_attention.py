"""Attention inside each segment of packed vision patches: the Triton kernel's checked entry point, the per-segment
PyTorch reference it is tested against, and the FLOP count its benchmarks report."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from runtime.kernels.vision_attention_triton import AttentionTile

__all__ = ["attention_flops", "head_dim_supported", "vision_attention", "vision_attention_reference"]

CUDA_DTYPES = (torch.bfloat16, torch.float16)
# float32 only in Triton's interpreter: on the GPU its dots would run in TF32, not float32
INTERPRETER_DTYPES = (*CUDA_DTYPES, torch.float32)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 128  # tl.dot's smallest tile; the largest the default tile holds in registers


def head_dim_supported(head_dim: int) -> bool:
    """Multiples of 8 (16-byte rows in bf16) from 16 to 128: 72 runs as 64 + a 16-lane tail, 64 and 128 untailed."""
    return MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM and head_dim % 8 == 0


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    """Raises ValueError naming what the kernel cannot take; reads only metadata, so it never syncs."""
    if q.dim() != 3 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must share one [tokens, heads, head_dim] shape, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if not head_dim_supported(q.shape[2]):
        raise ValueError(f"head_dim={q.shape[2]} is not supported; the kernel takes multiples of 8 from "
                         f"{MIN_HEAD_DIM} to {MAX_HEAD_DIM} (use the 'segments' attention backend otherwise)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if any(t.stride(2) != 1 for t in (q, k, v)):
        raise ValueError("each head's lanes must be contiguous (stride 1 on the last dim); token and head strides "
                         "may be anything")
    if cu_seqlens.dim() != 1 or cu_seqlens.dtype != torch.int32 or cu_seqlens.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be a 1-D int32 tensor of segment bounds, got {cu_seqlens.dtype} "
                         f"{tuple(cu_seqlens.shape)}")
    devices = {q.device, k.device, v.device, cu_seqlens.device}
    if interpreting():
        allowed = INTERPRETER_DTYPES
    elif all(d.type == "cuda" for d in devices):
        allowed = CUDA_DTYPES
    else:
        raise ValueError(f"tensors on {sorted(map(str, devices))}: the kernel needs them all on CUDA (or Triton's "
                         f"interpreter, TRITON_INTERPRET=1)")
    if len(devices) > 1:
        raise ValueError(f"q, k, v and cu_seqlens must share one device, got {sorted(map(str, devices))}")
    if q.dtype not in allowed:
        raise ValueError(f"dtype {q.dtype} is not supported here; use one of {allowed}")


def vision_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
    tile: AttentionTile | None = None,
) -> torch.Tensor:
    """Full (non-causal) attention of q, k, v [N, H, D] within each segment [cu_seqlens[i], cu_seqlens[i+1]), never
    across; out [N, H, D] contiguous in q's dtype. q, k, v may be token-strided views (e.g. of one qkv GEMM output):
    they are read in place. `max_seqlen`, a host int >= the longest segment, sizes the launch grid, so nothing is
    read back from the device and the call can be captured in a CUDA graph. `tile` overrides the launch shape."""
    check_inputs(q, k, v, cu_seqlens)
    from runtime.kernels.vision_attention_triton import DEFAULT_TILE, vision_attention_triton  # imports triton

    return vision_attention_triton(q, k, v, cu_seqlens, max_seqlen, tile or DEFAULT_TILE)


def vision_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor
) -> torch.Tensor:
    """SDPA in float32 per segment (reads the bounds back to the host: tests and benchmarks only); out in q's dtype."""
    bounds = cu_seqlens.tolist()
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    for start, end in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (t[start:end].float().transpose(0, 1) for t in (q, k, v))  # [H, length, D]
        out[start:end] = F.scaled_dot_product_attention(qs, ks, vs).transpose(0, 1).to(q.dtype)
    return out


def attention_flops(seq_lengths: Sequence[int], num_heads: int, head_dim: int) -> int:
    """q·kᵀ and p·v over every segment, two FLOPs a multiply-add, at the true head dim (no tile padding counted)."""
    return 4 * num_heads * head_dim * sum(n * n for n in seq_lengths)
