"""Triton MoE routing: softmax over experts, top-k and renormalisation, as a jit helper and as its own launch."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.moe_align import cdiv
from runtime.kernels.moe_reference import Routing


@triton.jit
def topk_softmax_rows(
    logits_ptr, rows, row_ok, num_experts, stride_lt,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_E: tl.constexpr, RENORM: tl.constexpr,
):
    """Top-k of softmax(logits[rows]) in fp32: (ids int32 [R, K_PAD], weights fp32 [R, K_PAD]), slot j the j-th
    largest; slots >= TOP_K hold 0. Every kernel that routes calls this, so they all pick the same experts."""
    cols = tl.arange(0, BLOCK_E)
    mask = row_ok[:, None] & (cols[None, :] < num_experts)
    x = tl.load(logits_ptr + rows[:, None] * stride_lt + cols[None, :], mask=mask, other=0.0)
    x = tl.where(mask, x.to(tl.float32), -1e30)  # in fp32: -1e30 would be -inf in fp16 logits
    x_max = tl.max(x, 1)
    p = tl.exp(x - x_max[:, None])
    p = p / tl.sum(p, 1)[:, None]
    p = tl.where(mask, p, -1.0)  # padding columns are never picked; -1e30 above, not -inf, keeps padding rows NaN-free
    kcols = tl.arange(0, K_PAD)
    top_w = tl.zeros([rows.shape[0], K_PAD], dtype=tl.float32)
    top_i = tl.zeros([rows.shape[0], K_PAD], dtype=tl.int32)
    for j in tl.static_range(TOP_K):
        # one reduction gives the best and its lowest index among equal probabilities, as a stable top-k picks
        best, idx = tl.max(p, 1, return_indices=True, return_indices_tie_break_left=True)
        top_w = tl.where(kcols[None, :] == j, best[:, None], top_w)
        top_i = tl.where(kcols[None, :] == j, idx[:, None], top_i)
        p = tl.where(cols[None, :] == idx[:, None], -2.0, p)
    if RENORM:
        top_w = top_w / tl.sum(top_w, 1)[:, None]
    return top_i, top_w


@triton.jit(do_not_specialize=["num_tokens"])  # one compile for every batch size
def _topk_softmax_kernel(
    logits_ptr, ids_ptr, weights_ptr,
    num_tokens, num_experts, stride_lt,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
    RENORM: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    row_ok = rows < num_tokens
    top_i, top_w = topk_softmax_rows(logits_ptr, rows, row_ok, num_experts, stride_lt, TOP_K, K_PAD, BLOCK_E, RENORM)
    kcols = tl.arange(0, K_PAD)
    out_mask = row_ok[:, None] & (kcols[None, :] < TOP_K)
    out_offs = rows[:, None] * TOP_K + kcols[None, :]
    tl.store(ids_ptr + out_offs, top_i, mask=out_mask)
    tl.store(weights_ptr + out_offs, top_w.to(weights_ptr.dtype.element_ty), mask=out_mask)


def topk_softmax_triton(logits: torch.Tensor, top_k: int, norm_topk_prob: bool = True) -> Routing:
    """`topk_softmax_reference` in one launch: logits [T, E] -> ids int32 [T, k], weights [T, k] in logits' dtype."""
    num_tokens, num_experts = logits.shape
    ids = torch.empty(num_tokens, top_k, dtype=torch.int32, device=logits.device)
    weights = torch.empty(num_tokens, top_k, dtype=logits.dtype, device=logits.device)
    block_t = 4
    _topk_softmax_kernel[(cdiv(num_tokens, block_t),)](
        logits, ids, weights, num_tokens, num_experts, logits.stride(0),
        TOP_K=top_k, K_PAD=next_power_of_2(top_k), BLOCK_T=block_t, BLOCK_E=next_power_of_2(num_experts),
        RENORM=norm_topk_prob, num_warps=4,
    )
    return Routing(ids, weights)
