"""The small MoE path's two kernels without tensor cores: multiply-adds on CUDA cores, for tiles under 16 columns.

At 1-4 tokens both GEMMs only stream weights; what limits them is how many programs keep loads in flight. An MMA
tile is at least 16 columns wide, so one token's 2048 down outputs make 128 programs (fewer than the H200's 132
SMs) and the weight stream stalls; here a tile may be 4 or 8 columns, and the k-products accumulate elementwise in
fp32 and are summed across k once, after the loop. Same routing, same outputs and ids/weights layout as
`moe_small_triton`, which picks these kernels when a tile config's block_n is under 16.
"""
from __future__ import annotations

import triton
import triton.language as tl

from runtime.kernels.moe_route_triton import topk_softmax_rows


@triton.jit(do_not_specialize=["num_tokens"])
def small_gate_up_gemv_kernel(
    logits_ptr, x_ptr, w_ptr, act_ptr, ids_ptr, weights_ptr,
    num_tokens, num_experts, N, K,
    stride_lt, stride_xt, stride_we, stride_wn, stride_ar,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_E: tl.constexpr, ROWS: tl.constexpr, RENORM: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):
    """Program (pair, n-tile), as `_small_gate_up_kernel`: the expert's leader pair computes
    act[t * k + slot, n] = silu(x[t] . w[e, n]) * (x[t] . w[e, N + n]) for every token t routed to expert e."""
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = tl.arange(0, ROWS)
    row_ok = rows < num_tokens
    top_ids, top_w = topk_softmax_rows(logits_ptr, rows, row_ok, num_experts, stride_lt, TOP_K, K_PAD, BLOCK_E,
                                       RENORM)
    slots = tl.arange(0, K_PAD)
    pair_of = rows[:, None] * TOP_K + slots[None, :]
    listed = row_ok[:, None] & (slots[None, :] < TOP_K)
    mine = pair_of == pair
    expert = tl.sum(tl.sum(tl.where(mine, top_ids, 0), 1), 0)
    if pid_n == 0:
        weight = tl.sum(tl.sum(tl.where(mine, top_w, 0.0), 1), 0)
        tl.store(ids_ptr + pair, expert)
        tl.store(weights_ptr + pair, weight.to(weights_ptr.dtype.element_ty))
    routed = listed & (top_ids == expert)
    leader = tl.min(tl.min(tl.where(routed, pair_of, ROWS * TOP_K), 1), 0)
    if leader == pair:
        uses = tl.max(routed.to(tl.int32), 1) > 0  # [ROWS]
        slot = tl.sum(tl.where(routed, slots[None, :], 0), 1)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        offs_k = tl.arange(0, BLOCK_K)
        # [ROWS, 1, BLOCK_K] activations against [1, BLOCK_N, BLOCK_K] weight rows (k contiguous: coalesced)
        a_ptrs = x_ptr + rows[:, None, None].to(tl.int64) * stride_xt + offs_k[None, None, :]
        g_ptrs = w_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :, None] * stride_wn + offs_k[None, None, :]
        u_ptrs = g_ptrs + N * stride_wn
        acc_g = tl.zeros([ROWS, BLOCK_N, BLOCK_K], dtype=tl.float32)
        acc_u = tl.zeros([ROWS, BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=uses[:, None, None], other=0.0)
                g = tl.load(g_ptrs, mask=n_ok[None, :, None], other=0.0)
                u = tl.load(u_ptrs, mask=n_ok[None, :, None], other=0.0)
            else:
                k_ok = (offs_k < K - k * BLOCK_K)[None, None, :]
                a = tl.load(a_ptrs, mask=uses[:, None, None] & k_ok, other=0.0)
                g = tl.load(g_ptrs, mask=n_ok[None, :, None] & k_ok, other=0.0)
                u = tl.load(u_ptrs, mask=n_ok[None, :, None] & k_ok, other=0.0)
            a = a.to(tl.float32)
            acc_g += a * g.to(tl.float32)
            acc_u += a * u.to(tl.float32)
            a_ptrs += BLOCK_K
            g_ptrs += BLOCK_K
            u_ptrs += BLOCK_K
        gate = tl.sum(acc_g, 2)  # [ROWS, BLOCK_N]
        act = gate * tl.sigmoid(gate) * tl.sum(acc_u, 2)
        out_rows = (rows * TOP_K + slot).to(tl.int64)
        tl.store(act_ptr + out_rows[:, None] * stride_ar + offs_n[None, :], act.to(act_ptr.dtype.element_ty),
                 mask=uses[:, None] & n_ok[None, :])


@triton.jit
def small_down_gemv_kernel(
    act_ptr, w_ptr, out_ptr, ids_ptr, weights_ptr,
    N, K,
    stride_ar, stride_we, stride_wn, stride_ot,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):
    """Program (token, n-tile), as `_small_down_sum_kernel`: out[t, n] = sum_j weights[t, j] * (act[t * k + j] .
    w[ids[t, j], n]), the routing weight applied to the activation chunk before its products.

    Plain loads are not pipelined through shared memory, so each step reads two experts' tiles, independent loads
    that are in flight together (an odd top-k's last step masks its second tile: no traffic)."""
    token = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    b_base = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :]  # [BLOCK_N, BLOCK_K]
    slots = tl.arange(0, K_PAD)
    first_pair = token * TOP_K
    token_ids = tl.load(ids_ptr + first_pair + slots, mask=slots < TOP_K, other=0).to(tl.int64)
    token_w = tl.load(weights_ptr + first_pair + slots, mask=slots < TOP_K, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    steps = tl.cdiv(K, BLOCK_K)
    for s in range(0, (TOP_K + 1) // 2 * steps):
        j = (s // steps) * 2
        k0 = (s % steps) * BLOCK_K
        second = j + 1 < TOP_K
        k_ok = offs_k < K - k0 if not EVEN_K else offs_k < BLOCK_K
        b_ok = n_ok[:, None] & k_ok[None, :]
        e0 = tl.sum(tl.where(slots == j, token_ids, 0), 0)
        e1 = tl.sum(tl.where(slots == j + 1, token_ids, 0), 0)
        w0 = tl.sum(tl.where(slots == j, token_w, 0.0), 0)
        w1 = tl.sum(tl.where(slots == j + 1, token_w, 0.0), 0)
        a_row = act_ptr + (first_pair + j).to(tl.int64) * stride_ar + k0 + offs_k
        b0 = tl.load(b_base + e0 * stride_we + k0, mask=b_ok, other=0.0)
        b1 = tl.load(b_base + e1 * stride_we + k0, mask=b_ok & second, other=0.0)
        a0 = tl.load(a_row, mask=k_ok, other=0.0).to(tl.float32) * w0
        a1 = tl.load(a_row + stride_ar, mask=k_ok & second, other=0.0).to(tl.float32) * w1
        acc += b0.to(tl.float32) * a0[None, :] + b1.to(tl.float32) * a1[None, :]
    out = tl.sum(acc, 1)
    tl.store(out_ptr + token.to(tl.int64) * stride_ot + offs_n, out.to(out_ptr.dtype.element_ty), mask=n_ok)
