"""Triton MoE for decode-size batches in two launches: top-k inside the gate_up GEMM, the top-k sum inside down.

No grouping pass. Every gate_up program routes the whole batch from the router logits (a few hundred values) and
takes one (token, expert) pair; the first pair of each expert (its leader) runs that expert for every token routed
to it, one MMA row per token (a token lists an expert once, so the batch's tokens are the tile's rows), and writes
each activation at its pair's row. The down kernel's grid is tokens x output tiles: a program adds its token's k
expert outputs, scaled by their routing weights, in one fp32 accumulator, so no per-pair output and no reduce launch
are left.

At a few tokens the down grid is small (the Thinker's at one token: 64 programs of 32 outputs, each streaming 8
experts), and an SM with one program has too few loads in flight to read at HBM speed, so down splits its loop
(`down_splits`): each split stores fp32 partials and counts its arrival on the tile's counter, and the tile's last
program adds the partials in split order. No float atomics anywhere, so graph replays equal eager calls bit for bit,
whichever program arrives last. (Splitting gate_up's K loop too was measured and never paid: its grid is k times
larger.)
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.moe_config import GemmConfig
from runtime.kernels.moe_route_triton import topk_softmax_rows
from runtime.kernels.paged_attention_triton import num_sms
from runtime.kernels.pdl import pdl_args, pdl_enter
from runtime.kernels.skinny_gemm_triton import MAX_SPLIT_TILES, arrival_counters

MMA_ROWS = 16  # tl.dot's smallest row count: the tile holds up to this many tokens before it grows
# down's loop is split until its programs reach this many an SM (H100, bench_moe_small_splits.py: within 3% of the
# best split count of each tile at 1-4 tokens, Thinker and Talker shapes)
SPLIT_PROGRAMS_PER_SM = 2


@triton.jit(do_not_specialize=["num_tokens"])
def _small_gate_up_kernel(
    logits_ptr, x_ptr, w_ptr, act_ptr, ids_ptr, weights_ptr,
    num_tokens, num_experts, N, K,
    stride_lt, stride_xt, stride_we, stride_wn, stride_ar,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_E: tl.constexpr, ROWS: tl.constexpr, RENORM: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, PDL: tl.constexpr,
):
    """Program (pair, n-tile). act[t * k + slot, n] = silu(x[t] . w[e, n]) * (x[t] . w[e, N + n]) for every token t
    routed to this pair's expert e, computed by the expert's leader only; ids/weights[pair] record the routing."""
    pdl_enter(PDL)
    pair = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = tl.arange(0, ROWS)  # row r of every tile is token r
    row_ok = rows < num_tokens
    top_ids, top_w = topk_softmax_rows(logits_ptr, rows, row_ok, num_experts, stride_lt, TOP_K, K_PAD, BLOCK_E,
                                       RENORM)  # [ROWS, K_PAD] each
    slots = tl.arange(0, K_PAD)
    pair_of = rows[:, None] * TOP_K + slots[None, :]  # [ROWS, K_PAD]: the pair index of each routing entry
    listed = row_ok[:, None] & (slots[None, :] < TOP_K)
    mine = pair_of == pair
    expert = tl.sum(tl.sum(tl.where(mine, top_ids, 0), 1), 0)
    if pid_n == 0:
        weight = tl.sum(tl.sum(tl.where(mine, top_w, 0.0), 1), 0)
        tl.store(ids_ptr + pair, expert)
        tl.store(weights_ptr + pair, weight.to(weights_ptr.dtype.element_ty))
    routed = listed & (top_ids == expert)  # [ROWS, K_PAD]: the entries that name this pair's expert
    leader = tl.min(tl.min(tl.where(routed, pair_of, ROWS * TOP_K), 1), 0)
    if leader == pair:
        uses = tl.max(routed.to(tl.int32), 1) > 0  # [ROWS] tokens routed to the expert
        slot = tl.sum(tl.where(routed, slots[None, :], 0), 1)  # [ROWS] where the expert sits in each token's list
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = x_ptr + rows[:, None].to(tl.int64) * stride_xt + offs_k[None, :]
        g_ptrs = w_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]
        u_ptrs = g_ptrs + N * stride_wn  # rows [gate; up]: the up half starts N rows later
        acc_g = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=uses[:, None], other=0.0)
                g = tl.load(g_ptrs, mask=n_ok[None, :], other=0.0)
                u = tl.load(u_ptrs, mask=n_ok[None, :], other=0.0)
            else:
                k_ok = offs_k < K - k * BLOCK_K
                a = tl.load(a_ptrs, mask=uses[:, None] & k_ok[None, :], other=0.0)
                g = tl.load(g_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
                u = tl.load(u_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc_g = tl.dot(a, g, acc_g)
            acc_u = tl.dot(a, u, acc_u)
            a_ptrs += BLOCK_K
            g_ptrs += BLOCK_K
            u_ptrs += BLOCK_K
        act = acc_g * tl.sigmoid(acc_g) * acc_u
        out_rows = (rows * TOP_K + slot).to(tl.int64)
        tl.store(act_ptr + out_rows[:, None] * stride_ar + offs_n[None, :], act.to(act_ptr.dtype.element_ty),
                 mask=uses[:, None] & n_ok[None, :])


@triton.jit
def _small_down_sum_kernel(
    act_ptr, w_ptr, out_ptr, ids_ptr, weights_ptr, part_ptr, counter_ptr,
    N, K, steps_per_split,
    stride_ar, stride_we, stride_wn, stride_ot, stride_ps,
    TOP_K: tl.constexpr, K_PAD: tl.constexpr, ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, SPLITS: tl.constexpr, PDL: tl.constexpr,
):
    """Program (token, n-tile, split): out[t, n] = sum_j weights[t, j] * (act[t * k + j] . w[ids[t, j], n]).

    One flat loop over (expert slot, K step) keeps the weight stream pipelined across the token's experts; the
    activation sits in MMA row 0 (the other rows stay zero). With SPLITS > 1 a split takes `steps_per_split` steps
    of that loop and the tile's last program to arrive adds the splits' partials."""
    pdl_enter(PDL)
    token = tl.program_id(0)
    pid_n = tl.program_id(1)
    split = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    first_row = (tl.arange(0, ROWS) == 0)[:, None]  # [ROWS, 1]
    a_base = act_ptr + tl.zeros([ROWS, 1], dtype=tl.int64) + offs_k[None, :]  # [ROWS, BLOCK_K]
    b_base = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None]  # [BLOCK_K, BLOCK_N]
    # the token's experts and weights, read once: taken from registers in the loop, the weight addresses depend on
    # no load there, so the pipeliner can keep num_stages - 1 weight tiles in flight across expert boundaries
    slots = tl.arange(0, K_PAD)
    first_pair = token * TOP_K
    token_ids = tl.load(ids_ptr + first_pair + slots, mask=slots < TOP_K, other=0).to(tl.int64)
    token_w = tl.load(weights_ptr + first_pair + slots, mask=slots < TOP_K, other=0.0).to(tl.float32)
    acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    steps = tl.cdiv(K, BLOCK_K)
    s_lo = split * steps_per_split
    for s in range(s_lo, tl.minimum(TOP_K * steps, s_lo + steps_per_split)):
        j = s // steps
        k0 = (s % steps) * BLOCK_K
        expert = tl.sum(tl.where(slots == j, token_ids, 0), 0)
        weight = tl.sum(tl.where(slots == j, token_w, 0.0), 0)
        a_ptrs = a_base + (first_pair + j).to(tl.int64) * stride_ar + k0
        b_ptrs = b_base + expert * stride_we + k0
        if EVEN_K:
            a = tl.load(a_ptrs, mask=first_row, other=0.0)
            b = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            k_ok = offs_k < K - k0
            a = tl.load(a_ptrs, mask=first_row & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc += tl.dot(a, b) * weight
    out = tl.sum(acc, 0)  # row 0 is the token's output; the other rows are zeros
    out_ptrs = out_ptr + token.to(tl.int64) * stride_ot + offs_n
    if SPLITS == 1:
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=n_ok)
    else:
        parts = part_ptr + token.to(tl.int64) * N + offs_n  # split 0's partials of this tile
        tl.store(parts + split * stride_ps, out, mask=n_ok)
        tl.debug_barrier()  # every thread's partials are stored before the arrival releases them
        counter = counter_ptr + token * tl.num_programs(1) + pid_n
        if tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == SPLITS - 1:  # the last split of the tile
            out = tl.zeros([BLOCK_N], dtype=tl.float32)
            for p in range(SPLITS):  # split order: the same sums every run
                out += tl.load(parts + p * stride_ps, mask=n_ok, other=0.0, cache_modifier=".cg")
            tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=n_ok)
            tl.store(counter, 0)  # zero for the next launch


def down_splits(programs: int, steps: int, sms: int) -> int:
    """How many ways down splits its loop of `steps` (expert slot, K step) steps run by `programs` programs: until
    there are SPLIT_PROGRAMS_PER_SM programs an SM, a split at least one step."""
    return max(1, min(-(-SPLIT_PROGRAMS_PER_SM * sms // programs), steps))


class DownPlan(NamedTuple):
    tiles: int  # output tiles of a token
    splits: int  # used splits of the loop: none of them empty
    steps_per_split: int


def plan_down(num_tokens: int, hidden: int, inter: int, top_k: int, cfg: GemmConfig, sms: int,
              splits: int | None = None) -> DownPlan:
    """down's grid: `splits` ways (None: `down_splits`'s rule), cut as evenly as whole steps allow; unsplit when the
    tiles outnumber the arrival counters (the rule never splits that many)."""
    tiles = triton.cdiv(hidden, cfg.block_n)
    steps = top_k * triton.cdiv(inter, cfg.block_k)  # the flat (expert slot, K step) loop
    wanted = splits or down_splits(num_tokens * tiles, steps, sms)
    if num_tokens * tiles > MAX_SPLIT_TILES:
        wanted = 1
    per_split = -(-steps // max(1, min(wanted, steps)))
    return DownPlan(tiles, -(-steps // per_split), per_split)


def experts_small_triton(
    x: torch.Tensor, logits: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, top_k: int,
    norm_topk_prob: bool, gate_up_cfg: GemmConfig, down_cfg: GemmConfig, splits: int | None = None,
) -> torch.Tensor:
    """Route by `logits` [T, E] and run the routed experts: x [T, H] -> [T, H], two launches, no host sync.
    `splits`: how many ways down splits its loop (None: `down_splits`'s rule; a benchmark sweeps it)."""
    num_tokens, hidden = x.shape
    num_experts, two_inter, _ = w_gate_up.shape
    inter = two_inter // 2
    num_pairs = num_tokens * top_k
    assert top_k <= num_experts and logits.shape == (num_tokens, num_experts) and logits.stride(1) == 1
    assert x.stride(1) == 1 and w_gate_up.stride(2) == 1 and w_down.stride(2) == 1, "rows must be contiguous"
    act = torch.empty(num_pairs, inter, dtype=x.dtype, device=x.device)  # pair-major: token t's slot j at t * k + j
    ids = torch.empty(num_pairs, dtype=torch.int32, device=x.device)
    weights = torch.empty(num_pairs, dtype=logits.dtype, device=x.device)  # the reference rounds them so
    out = torch.empty_like(x)
    _small_gate_up_kernel[(num_pairs, triton.cdiv(inter, gate_up_cfg.block_n))](
        logits, x, w_gate_up, act, ids, weights,
        num_tokens, num_experts, inter, hidden,
        logits.stride(0), x.stride(0), w_gate_up.stride(0), w_gate_up.stride(1), act.stride(0),
        TOP_K=top_k, K_PAD=next_power_of_2(top_k), BLOCK_E=next_power_of_2(num_experts),
        ROWS=max(MMA_ROWS, next_power_of_2(num_tokens)), RENORM=norm_topk_prob,
        BLOCK_N=gate_up_cfg.block_n, BLOCK_K=gate_up_cfg.block_k, EVEN_K=hidden % gate_up_cfg.block_k == 0,
        num_warps=gate_up_cfg.num_warps, num_stages=gate_up_cfg.num_stages, **pdl_args(x),
    )
    plan = plan_down(num_tokens, hidden, inter, top_k, down_cfg, num_sms(x.device.index or 0), splits)
    parts = counters = out  # unused without splits
    if plan.splits > 1:
        parts = torch.empty(plan.splits, num_tokens, hidden, dtype=torch.float32, device=x.device)
        # shared with the skinny GEMM's split-K launches
        counters = arrival_counters(x.device, x.is_cuda and torch.cuda.is_current_stream_capturing())
    _small_down_sum_kernel[(num_tokens, plan.tiles, plan.splits)](
        act, w_down, out, ids, weights, parts, counters,
        hidden, inter, plan.steps_per_split,
        act.stride(0), w_down.stride(0), w_down.stride(1), out.stride(0), parts.stride(0),
        TOP_K=top_k, K_PAD=next_power_of_2(top_k), ROWS=MMA_ROWS,
        BLOCK_N=down_cfg.block_n, BLOCK_K=down_cfg.block_k, EVEN_K=inter % down_cfg.block_k == 0,
        SPLITS=plan.splits, num_warps=down_cfg.num_warps, num_stages=down_cfg.num_stages, **pdl_args(x),
    )
    return out
