"""Triton kernels: residual-add + RMSNorm in one pass (optionally with the MoE router logits), and q/k per-head
RMSNorm + rotary in one launch (optionally storing k and v in the paged KV cache)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.pdl import pdl_args, pdl_enter
from runtime.kernels.rmsnorm_reference import QK, NormResult, RoutedNorm

ROUTER_BLOCK_E = 4  # router rows per program: 32 programs per token at E=128, each reading 16 KB of router weights


@triton.jit
def _add_rmsnorm_row(
    x_ptr, res_ptr, w_ptr, row, N, eps, stride_x, stride_r, cols, mask,
    HAS_RESIDUAL: tl.constexpr, RES_DTYPE: tl.constexpr, ZERO_CENTRED: tl.constexpr,
):
    """(h, weight * rmsnorm(h)) of one row, h = x + residual rounded to the residual dtype; normed in fp32 values
    already rounded as the model rounds them (normed, then weight * normed, in the activation dtype). ZERO_CENTRED:
    Qwen3.5's (1 + weight) * rmsnorm(h), kept in fp32 until the caller's single rounding."""
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # round the sum to the activation dtype first: the model's residual stream is stored that way
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32))
        x = x.to(RES_DTYPE)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, 0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if ZERO_CENTRED:
        return x, xf * rstd * (1.0 + w)
    normed = (xf * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    return x, normed * w


@triton.jit
def _add_rmsnorm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, N, eps,
    stride_x, stride_r, stride_o, stride_ro,
    HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, ZERO_CENTRED: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    h, normed = _add_rmsnorm_row(x_ptr, res_ptr, w_ptr, row, N, eps, stride_x, stride_r, cols, mask,
                                 HAS_RESIDUAL, res_out_ptr.dtype.element_ty, ZERO_CENTRED)
    if HAS_RESIDUAL:
        tl.store(res_out_ptr + row * stride_ro + cols, h, mask=mask)
    tl.store(out_ptr + row * stride_o + cols, normed.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _add_rmsnorm_router_kernel(
    x_ptr, res_ptr, w_ptr, router_ptr, out_ptr, res_out_ptr, logits_ptr, N, num_experts, eps,
    stride_x, stride_r, stride_o, stride_ro, stride_re, stride_l,
    HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, ZERO_CENTRED: tl.constexpr,
    PDL: tl.constexpr,
):
    """Program (row, expert block): every program normalises the row (a few KB, cheaper than a second launch) and
    computes BLOCK_E router logits from it; the first program of the row also stores the norm and the residual."""
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    eblock = tl.program_id(1)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    h, normed = _add_rmsnorm_row(x_ptr, res_ptr, w_ptr, row, N, eps, stride_x, stride_r, cols, mask,
                                 HAS_RESIDUAL, res_out_ptr.dtype.element_ty, ZERO_CENTRED)
    normed = normed.to(out_ptr.dtype.element_ty)  # the MoE input, as the router GEMM would read it
    if eblock == 0:
        if HAS_RESIDUAL:
            tl.store(res_out_ptr + row * stride_ro + cols, h, mask=mask)
        tl.store(out_ptr + row * stride_o + cols, normed, mask=mask)
    experts = eblock * BLOCK_E + tl.arange(0, BLOCK_E)
    e_ok = experts < num_experts
    r = tl.load(router_ptr + experts[:, None].to(tl.int64) * stride_re + cols[None, :],
                mask=e_ok[:, None] & mask[None, :], other=0.0)
    logits = tl.sum(r.to(tl.float32) * normed.to(tl.float32)[None, :], 1)  # [BLOCK_E], fp32 accumulation
    tl.store(logits_ptr + row * stride_l + experts, logits.to(logits_ptr.dtype.element_ty), mask=e_ok)


def fused_add_rmsnorm_triton(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float = 1e-6,
    zero_centred: bool = False,
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
        HAS_RESIDUAL=residual is not None, BLOCK_N=block_n, ZERO_CENTRED=zero_centred,
        num_warps=min(max(block_n // 256, 1), 8), **pdl_args(x),
    )
    return NormResult(out.view(shape), res_out.view(shape) if residual is not None else x)


def fused_add_rmsnorm_router_triton(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, router_w: torch.Tensor, eps: float = 1e-6,
    zero_centred: bool = False,
) -> RoutedNorm:
    """`add_rmsnorm_router_reference` in one launch over x [T, H]: for decode-size T (the router GEMV runs on the
    CUDA cores, every program re-reading the row), where it saves the router GEMM's launch."""
    rows, hidden = x.shape
    num_experts = router_w.shape[0]
    res = residual if residual is not None else x
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else x
    logits = torch.empty(rows, num_experts, dtype=x.dtype, device=x.device)
    assert router_w.stride(1) == 1 and router_w.shape[1] == hidden
    block_n = next_power_of_2(hidden)
    block_e = ROUTER_BLOCK_E
    _add_rmsnorm_router_kernel[(rows, triton.cdiv(num_experts, block_e))](
        x, res, weight, router_w, out, res_out, logits, hidden, num_experts, eps,
        x.stride(0), res.stride(0), out.stride(0), res_out.stride(0), router_w.stride(0), logits.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK_N=block_n, BLOCK_E=block_e, ZERO_CENTRED=zero_centred,
        num_warps=min(max(block_n * block_e // 1024, 1), 8), **pdl_args(x),
    )
    return RoutedNorm(out, res_out if residual is not None else x, logits)


@triton.jit
def _norm_rope_heads(
    x_ptr, out_ptr, w_ptr, cos_ptr, sin_ptr, token, num_heads, eps, stride_xt, stride_xh, out_row, stride_oh,
    HALF: tl.constexpr, HEADS: tl.constexpr,
):
    """Normalise and rotate all heads of one token into out_ptr + out_row + head * stride_oh: halves
    x1 = x[:, :D/2], x2 = x[:, D/2:] pair up under rotation."""
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
    out = out_ptr + out_row + h[:, None] * stride_oh + c[None, :]
    out_dtype = out_ptr.dtype.element_ty
    tl.store(out, (n1 * c1 - n2 * s1).to(dtype).to(out_dtype), mask=h_ok)
    tl.store(out + HALF, (n2 * c2 + n1 * s2).to(dtype).to(out_dtype), mask=h_ok)


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr,
    num_q_heads, num_k_heads, eps, stride_qt, stride_qh, stride_kt, stride_kh,
    HALF: tl.constexpr, HEADS: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    token = tl.program_id(0).to(tl.int64)
    if tl.program_id(1) == 0:
        _norm_rope_heads(q_ptr, q_out_ptr, qw_ptr, cos_ptr, sin_ptr, token, num_q_heads, eps,
                         stride_qt, stride_qh, token * (num_q_heads * 2 * HALF), 2 * HALF, HALF, HEADS)
    else:
        _norm_rope_heads(k_ptr, k_out_ptr, kw_ptr, cos_ptr, sin_ptr, token, num_k_heads, eps,
                         stride_kt, stride_kh, token * (num_k_heads * 2 * HALF), 2 * HALF, HALF, HEADS)


@triton.jit
def _qk_norm_rope_cache_kernel(
    q_ptr, k_ptr, v_ptr, q_out_ptr, cache_ptr, slots_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr,
    num_q_heads, num_k_heads, eps, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cache_kv, stride_cache_slot, stride_cache_head,
    HALF: tl.constexpr, HEADS: tl.constexpr, PDL: tl.constexpr,
):
    """Program (token, 0) writes the token's q; program (token, 1) stores its normed, rotated k and its v at the
    token's cache slot (padding rows of a graph all share the scratch slot; whichever write lands is fine there)."""
    pdl_enter(PDL)
    token = tl.program_id(0).to(tl.int64)
    if tl.program_id(1) == 0:
        _norm_rope_heads(q_ptr, q_out_ptr, qw_ptr, cos_ptr, sin_ptr, token, num_q_heads, eps,
                         stride_qt, stride_qh, token * (num_q_heads * 2 * HALF), 2 * HALF, HALF, HEADS)
    else:
        slot_row = tl.load(slots_ptr + token).to(tl.int64) * stride_cache_slot
        _norm_rope_heads(k_ptr, cache_ptr, kw_ptr, cos_ptr, sin_ptr, token, num_k_heads, eps,
                         stride_kt, stride_kh, slot_row, stride_cache_head, HALF, HEADS)
        h = tl.arange(0, HEADS)
        d = tl.arange(0, 2 * HALF)
        h_ok = (h < num_k_heads)[:, None]
        v = tl.load(v_ptr + token * stride_vt + h[:, None] * stride_vh + d[None, :], mask=h_ok, other=0.0)
        dst = cache_ptr + stride_cache_kv + slot_row + h[:, None] * stride_cache_head + d[None, :]
        tl.store(dst, v.to(cache_ptr.dtype.element_ty), mask=h_ok)


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
        HALF=head_dim // 2, HEADS=next_power_of_2(max(num_q_heads, num_k_heads)), num_warps=4, **pdl_args(q),
    )
    return QK(q_out, k_out)


def qk_norm_rope_cache_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, eps: float = 1e-6,
) -> torch.Tensor:
    """`qk_norm_rope_cache_reference` in one launch (instead of norm-rope and two index_copy); returns q [T, Hq, D].

    kv_cache [2, num_blocks, block_size, Hkv, D] contiguous; slot_mapping int64 [T] flat slots."""
    num_tokens, num_q_heads, head_dim = q.shape
    num_k_heads = k.shape[1]
    assert q.stride(2) == 1 and k.stride(2) == 1 and v.stride(2) == 1 and head_dim % 2 == 0
    assert kv_cache.is_contiguous() and kv_cache.shape[3:] == k.shape[1:] and v.shape == k.shape
    cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    _qk_norm_rope_cache_kernel[(num_tokens, 2)](
        q, k, v, q_out, kv_cache, slot_mapping, q_weight, k_weight, cos, sin, num_q_heads, num_k_heads, eps,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        kv_cache.stride(0), kv_cache.stride(2), kv_cache.stride(3),
        HALF=head_dim // 2, HEADS=next_power_of_2(max(num_q_heads, num_k_heads)), num_warps=4, **pdl_args(q),
    )
    return q_out
