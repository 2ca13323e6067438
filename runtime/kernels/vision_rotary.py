"""The vision tower's rotate-half rotary on q and k: one Triton launch on CUDA, the PyTorch reference otherwise.

Both paths compute in float32 (cos/sin stay float32, as transformers' `apply_rotary_pos_emb_vision` does) and round
once to the activation dtype, so they agree bit for bit.
"""
from __future__ import annotations

import torch

from runtime.kernels._backend import use_triton
from runtime.kernels.rmsnorm_reference import QK

__all__ = ["QK", "rotate_half_reference", "vision_rotary", "vision_rotary_reference"]


def rotate_half_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [N, H, D] by cos/sin [N, D] in float32, back in x's dtype."""
    xf = x.to(torch.float32)
    half = xf.shape[-1] // 2
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


def vision_rotary_reference(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> QK:
    return QK(rotate_half_reference(q, cos, sin), rotate_half_reference(k, cos, sin))


def vision_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> QK:
    """q, k [N, H, D] (token-strided views of one fused qkv output are fine) rotated by float32 cos/sin [N, D].

    Returns contiguous [N, H, D] tensors in q's dtype.
    """
    heads_packed = q.stride()[1:] == k.stride()[1:] == (q.shape[-1], 1)  # each token's heads contiguous
    if use_triton(q, k) and cos.is_cuda and sin.is_cuda and q.shape == k.shape and heads_packed:
        from runtime.kernels.vision_rotary_triton import vision_rotary_triton  # imports triton

        return vision_rotary_triton(q, k, cos, sin)
    return vision_rotary_reference(q, k, cos, sin)
