"""Triton kernels: residual-add + RMSNorm in one pass, and q/k per-head RMSNorm + rotary in one launch."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.rmsnorm_reference import QK, NormResult


@triton.jit
def _add_rmsnorm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, N, eps,
    stride_x, stride_r, stride_o, stride_ro,
    HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # round the sum to the activation dtype first: the model's residual stream is stored that way
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32))
        x = x.to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_ro + cols, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, 0) / N + eps)
    normed = (xf * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def fused_add_rmsnorm_triton(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6
) -> NormResult:
    """`add_rmsnorm_reference` in one pass over x [.., H] (and residual): one read each, two writes."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])  # [rows, H]
    res2 = residual.reshape(-1, shape[-1]) if residual is not None else x2
    rows, hidden = x2.shape
    out = torch.empty_like(x2)
    res_out = torch.empty_like(x2) if residual is not None else x2
    block_n = next_power_of_2(hidden)
    _add_rmsnorm_kernel[(rows,)](
        x2, res2, weight, out, res_out, hidden, eps,
        x2.stride(0), res2.stride(0), out.stride(0), res_out.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK_N=block_n, num_warps=min(max(block_n // 256, 1), 8),
    )
    return NormResult(out.view(shape), res_out.view(shape) if residual is not None else x)


@triton.jit
def _norm_rope_heads(
    x_ptr, out_ptr, w_ptr, cos_ptr, sin_ptr, token, num_heads, eps, stride_xt, stride_xh,
    HALF: tl.constexpr, HEADS: tl.constexpr,
):
    """Normalise and rotate all heads of one token: halves x1 = x[:, :D/2], x2 = x[:, D/2:] pair up under rotation."""
    h = tl.arange(0, HEADS)
    c = tl.arange(0, HALF)
    h_ok = (h < num_heads)[:, None]
    base = x_ptr + token * stride_xt + h[:, None] * stride_xh + c[None, :]
    x1 = tl.load(base, mask=h_ok, other=0.0)
    x2 = tl.load(base + HALF, mask=h_ok, other=0.0)
    dtype = x1.dtype
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    rstd = tl.rsqrt((tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / (2 * HALF) + eps)[:, None]
    w1 = tl.load(w_ptr + c).to(tl.float32)[None, :]
    w2 = tl.load(w_ptr + HALF + c).to(tl.float32)[None, :]
    # rounding points follow the model: normed, then weight * normed, both in the activation dtype
    n1 = ((x1 * rstd).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
    n2 = ((x2 * rstd).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
    cs = cos_ptr + token * (2 * HALF) + c
    sn = sin_ptr + token * (2 * HALF) + c
    c1 = tl.load(cs).to(dtype).to(tl.float32)[None, :]
    c2 = tl.load(cs + HALF).to(dtype).to(tl.float32)[None, :]
    s1 = tl.load(sn).to(dtype).to(tl.float32)[None, :]
    s2 = tl.load(sn + HALF).to(dtype).to(tl.float32)[None, :]
    out = out_ptr + token * (num_heads * 2 * HALF) + h[:, None] * (2 * HALF) + c[None, :]
    tl.store(out, (n1 * c1 - n2 * s1).to(dtype), mask=h_ok)
    tl.store(out + HALF, (n2 * c2 + n1 * s2).to(dtype), mask=h_ok)


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr,
    num_q_heads, num_k_heads, eps, stride_qt, stride_qh, stride_kt, stride_kh,
    HALF: tl.constexpr, HEADS: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    if tl.program_id(1) == 0:
        _norm_rope_heads(q_ptr, q_out_ptr, qw_ptr, cos_ptr, sin_ptr, token, num_q_heads, eps,
                         stride_qt, stride_qh, HALF, HEADS)
    else:
        _norm_rope_heads(k_ptr, k_out_ptr, kw_ptr, cos_ptr, sin_ptr, token, num_k_heads, eps,
                         stride_kt, stride_kh, HALF, HEADS)


def qk_norm_rope_triton(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, eps: float = 1e-6,
) -> QK:
    """`qk_norm_rope_reference` in one launch; q/k may be strided views of a fused qkv output."""
    num_tokens, num_q_heads, head_dim = q.shape
    num_k_heads = k.shape[1]
    assert q.stride(2) == 1 and k.stride(2) == 1 and head_dim % 2 == 0
    cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    _qk_norm_rope_kernel[(num_tokens, 2)](
        q, k, q_out, k_out, q_weight, k_weight, cos, sin, num_q_heads, num_k_heads, eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        HALF=head_dim // 2, HEADS=next_power_of_2(max(num_q_heads, num_k_heads)), num_warps=4,
    )
    return QK(q_out, k_out)
