"""Triton grouped GEMMs for the MoE experts: gate_up with SwiGLU fused in its epilogue; down with the routing weight."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels.moe_align import MoeAlignment
from runtime.kernels.moe_config import GemmConfig


@triton.jit(do_not_specialize=["num_pairs"])  # one compile for every batch size
def _gate_up_silu_kernel(
    x_ptr, w_ptr, act_ptr, sorted_ids_ptr, expert_ids_ptr, num_padded_ptr,
    N, K, num_pairs, top_k,
    stride_xt, stride_we, stride_wn, stride_ar,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):
    """act[row, n] = silu(x[tok] . w[e, n]) * (x[tok] . w[e, N + n]) for each padded row of expert e's block."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
        return
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ids_ptr + rows)
    row_ok = pair < num_pairs
    token = (pair // top_k).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = x_ptr + token[:, None] * stride_xt + offs_k[None, :]
    g_ptrs = w_ptr + expert * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]  # [BLOCK_K, BLOCK_N]
    u_ptrs = g_ptrs + N * stride_wn  # rows [gate; up]: the up half starts N rows later
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            g = tl.load(g_ptrs, mask=n_ok[None, :], other=0.0)
            u = tl.load(u_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            k_ok = offs_k < K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            g = tl.load(g_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            u = tl.load(u_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc_g = tl.dot(a, g, acc_g)
        acc_u = tl.dot(a, u, acc_u)
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    act = acc_g * tl.sigmoid(acc_g) * acc_u
    out_ptrs = act_ptr + rows[:, None].to(tl.int64) * stride_ar + offs_n[None, :]
    tl.store(out_ptrs, act.to(act_ptr.dtype.element_ty), mask=n_ok[None, :])


@triton.jit(do_not_specialize=["num_pairs"])
def _down_weighted_kernel(
    act_ptr, w_ptr, out_ptr, topk_w_ptr, sorted_ids_ptr, expert_ids_ptr, num_padded_ptr,
    N, K, num_pairs,
    stride_ar, stride_we, stride_wn, stride_or,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):
    """out[pair, n] = topk_w[pair] * (act[row] . w[e, n]), written at the pair's own row (token-major)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
        return
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ids_ptr + rows)
    row_ok = pair < num_pairs
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = act_ptr + rows[:, None].to(tl.int64) * stride_ar + offs_k[None, :]
    b_ptrs = w_ptr + expert * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]  # [BLOCK_K, BLOCK_N]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            k_ok = offs_k < K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    weight = tl.load(topk_w_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)
    acc = acc * weight[:, None]
    out_ptrs = out_ptr + pair[:, None].to(tl.int64) * stride_or + offs_n[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])


def gate_up_silu(
    x: torch.Tensor, w_gate_up: torch.Tensor, align: MoeAlignment, top_k: int, cfg: GemmConfig
) -> torch.Tensor:
    """x [T, H], w_gate_up [E, 2I, H] -> act [max_padded, I] in alignment row order (padding rows hold zeros)."""
    num_pairs = x.shape[0] * top_k
    inter = w_gate_up.shape[1] // 2
    hidden = x.shape[1]
    assert x.stride(1) == 1 and w_gate_up.stride(2) == 1, "rows must be contiguous in the hidden dim"
    act = torch.empty(align.sorted_ids.numel(), inter, dtype=x.dtype, device=x.device)
    grid = (align.expert_ids.numel(), triton.cdiv(inter, cfg.block_n))
    _gate_up_silu_kernel[grid](
        x, w_gate_up, act, align.sorted_ids, align.expert_ids, align.num_padded,
        inter, hidden, num_pairs, top_k,
        x.stride(0), w_gate_up.stride(0), w_gate_up.stride(1), act.stride(0),
        BLOCK_M=align.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, EVEN_K=hidden % cfg.block_k == 0,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return act


def down_weighted(
    act: torch.Tensor, w_down: torch.Tensor, topk_weights: torch.Tensor, align: MoeAlignment, cfg: GemmConfig
) -> torch.Tensor:
    """act [max_padded, I], w_down [E, H, I] -> per-pair outputs [T*k, H] scaled by their routing weight."""
    num_pairs = topk_weights.numel()
    hidden, inter = w_down.shape[1], w_down.shape[2]
    assert w_down.stride(2) == 1, "w_down rows must be contiguous in the intermediate dim"
    out = torch.empty(num_pairs, hidden, dtype=act.dtype, device=act.device)
    grid = (align.expert_ids.numel(), triton.cdiv(hidden, cfg.block_n))
    _down_weighted_kernel[grid](
        act, w_down, out, topk_weights, align.sorted_ids, align.expert_ids, align.num_padded,
        hidden, inter, num_pairs,
        act.stride(0), w_down.stride(0), w_down.stride(1), out.stride(0),
        BLOCK_M=align.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, EVEN_K=inter % cfg.block_k == 0,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
