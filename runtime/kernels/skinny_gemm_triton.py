"""Triton skinny GEMM: y = x @ W^T for at most 16 rows, the weight read once, split over K when the outputs alone
give too few programs; epilogues silu(gate) * up over a stacked [gate; up] weight, or + residual."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels.paged_attention_triton import num_sms
from runtime.kernels.pdl import pdl_args, pdl_release, pdl_wait, prefetch_l2
from runtime.kernels.skinny_gemm import SKINNY_MAX_ROWS, Epilogue, SkinnyConfig, skinny_config, split_plan

# Split-K launches count their programs' arrivals per output tile here; a tile's last program resets its counter.
MAX_SPLIT_TILES = 4096
_COUNTERS: dict[torch.device, torch.Tensor] = {}
# the jitted kernel reads module globals only as constexprs
SILU_MUL = tl.constexpr(int(Epilogue.SILU_MUL))
RESIDUAL = tl.constexpr(int(Epilogue.RESIDUAL))


@triton.jit
def _finish(acc, acc_up, out_ptr, res_ptr, rows, cols, mask, stride_om, stride_rm, EPILOGUE: tl.constexpr):
    """The epilogue in fp32 on the tile's sums [ROWS, BLOCK_N], then one rounding into out."""
    if EPILOGUE == SILU_MUL:
        acc = acc * tl.sigmoid(acc) * acc_up
    if EPILOGUE == RESIDUAL:
        acc += tl.load(res_ptr + rows[:, None] * stride_rm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _prefetch_weights(w_ptr, cols, col_ok, N, K, k_lo, k_hi, EPILOGUE: tl.constexpr, LINES: tl.constexpr):
    """Every 128-byte line of the program's weight rows over [k_lo, k_hi) into L2, LINES lines of each row at a time
    (the up half's rows too), without waiting for them."""
    per_line: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth
    rows = cols[:, None].to(tl.int64) * K
    for k0 in range(k_lo, k_hi, LINES * per_line):
        ks = k0 + tl.arange(0, LINES) * per_line
        ok = col_ok[:, None] & (ks < k_hi)[None, :]
        prefetch_l2(tl.where(ok, w_ptr + rows + ks[None, :], w_ptr))  # a masked line asks for the first one again
        if EPILOGUE == SILU_MUL:
            prefetch_l2(tl.where(ok, w_ptr + N.to(tl.int64) * K + rows + ks[None, :], w_ptr))


@triton.jit(do_not_specialize=["M"])  # one compile for every row count
def _skinny_gemm_kernel(
    x_ptr, w_ptr, out_ptr, res_ptr, part_ptr, counter_ptr,
    M, N, K, k_per_split,
    stride_xm, stride_om, stride_rm, stride_ps, stride_pm,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr, EPILOGUE: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr,
):
    """Program (split, tile): outputs [tile * BLOCK_N, +BLOCK_N) of every row, over K [split * k_per_split, + that).

    The M rows are the MMA tile's first rows (the rest masked to zero), so each weight element is loaded by one
    program only. With SILU_MUL output n takes weight rows n (gate) and N + n (up) in the same loop. With splits,
    each program stores its fp32 partials [SPLIT_K, M, weight rows] and counts its arrival; the tile's last program
    adds the SPLIT_K partials in split order (deterministic, no float atomics) and runs the epilogue.

    With PDL the program asks L2 for its weight slice before it waits for the kernel before (the weights are nobody's
    output), so their stream overlaps that kernel's end; x, the partials and the counters wait."""
    pdl_release(PDL)
    split = tl.program_id(0)
    tile = tl.program_id(1)
    rows = tl.arange(0, ROWS)
    row_ok = rows < M
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    k_lo = split * k_per_split
    k_hi = tl.minimum(K, k_lo + k_per_split)
    if PDL:
        _prefetch_weights(w_ptr, cols, col_ok, N, K, k_lo, k_hi, EPILOGUE, 8)
    pdl_wait(PDL)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + (k_lo + offs_k)[None, :]  # [ROWS, BLOCK_K]
    w_ptrs = w_ptr + cols[None, :].to(tl.int64) * K + (k_lo + offs_k)[:, None]  # [BLOCK_K, BLOCK_N]: W^T's tile
    up_ptrs = w_ptr + (cols + N)[None, :].to(tl.int64) * K + (k_lo + offs_k)[:, None]
    acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)  # SILU_MUL only
    for k0 in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:
            x_mask = row_ok[:, None]
            w_mask = col_ok[None, :]
        else:
            k_ok = offs_k < K - k0
            x_mask = row_ok[:, None] & k_ok[None, :]
            w_mask = k_ok[:, None] & col_ok[None, :]
        a = tl.load(x_ptrs, mask=x_mask, other=0.0)
        acc = tl.dot(a, tl.load(w_ptrs, mask=w_mask, other=0.0), acc, input_precision=PRECISION)
        if EPILOGUE == SILU_MUL:
            acc_up = tl.dot(a, tl.load(up_ptrs, mask=w_mask, other=0.0), acc_up, input_precision=PRECISION)
            up_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT_K == 1:
        _finish(acc, acc_up, out_ptr, res_ptr, rows, cols, mask, stride_om, stride_rm, EPILOGUE)
    else:
        parts = part_ptr + rows[:, None] * stride_pm + cols[None, :]  # split 0's; the up half N columns on
        tl.store(parts + split * stride_ps, acc, mask=mask)
        if EPILOGUE == SILU_MUL:
            tl.store(parts + split * stride_ps + N, acc_up, mask=mask)
        # every thread's partial stores come before the arrival (the barrier), and the arrival releases them
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:  # the tile's last program: every split's partials are visible now
            acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            acc_up = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            for s in range(SPLIT_K):  # split order, whichever program arrived last: the same sums every run
                acc += tl.load(parts + s * stride_ps, mask=mask, other=0.0, cache_modifier=".cg")
                if EPILOGUE == SILU_MUL:
                    acc_up += tl.load(parts + s * stride_ps + N, mask=mask, other=0.0, cache_modifier=".cg")
            _finish(acc, acc_up, out_ptr, res_ptr, rows, cols, mask, stride_om, stride_rm, EPILOGUE)
            tl.store(counter_ptr + tile, 0)  # zero for the next launch (launches on a stream run in order)


def arrival_counters(device: torch.device, capturing: bool) -> torch.Tensor:
    """The device's MAX_SPLIT_TILES int32 arrival counters, all zero between launches, shared by every split-K
    launch on it (so two streams must not run split-K launches at once). Allocated by the first split-K call,
    which must run outside CUDA-graph capture (`capturing`): there torch.zeros would only be recorded, not run."""
    counters = _COUNTERS.get(device)
    if counters is None:
        if capturing:
            raise RuntimeError(f"the first split-K skinny_linear on {device} is inside CUDA-graph capture: run one "
                               "call before capturing (a warm-up) so its arrival counters exist")
        counters = _COUNTERS[device] = torch.zeros(MAX_SPLIT_TILES, dtype=torch.int32, device=device)
    return counters


def skinny_gemm_triton(
    x: torch.Tensor, weight: torch.Tensor, epilogue: Epilogue | None = None, residual: torch.Tensor | None = None,
    config: SkinnyConfig | None = None,
) -> torch.Tensor:
    """`skinny_linear_reference` in one launch, inputs as `skinny_linear` checks them (any float dtype: fp32 for
    the interpreter tests); `config` None takes `skinny_config`'s."""
    rows, k = x.shape
    weight_rows = weight.shape[0]
    n = weight_rows // 2 if epilogue is Epilogue.SILU_MUL else weight_rows
    if config is None:
        config = skinny_config(n, weight_rows, k, num_sms(x.device.index or 0), x.element_size())
    plan = split_plan(k, config.block_k, config.split_k)
    tiles = triton.cdiv(n, config.block_n)
    out = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    parts = counters = out  # unused without splits
    if plan.splits > 1:
        if tiles > MAX_SPLIT_TILES:
            raise ValueError(f"split-K over {tiles} tiles of {config.block_n} outputs: at most {MAX_SPLIT_TILES}; "
                             "widen block_n or set split_k=1")
        parts = torch.empty(plan.splits, rows, weight_rows, dtype=torch.float32, device=x.device)
        counters = arrival_counters(x.device, x.is_cuda and torch.cuda.is_current_stream_capturing())
    res = residual if residual is not None else out
    _skinny_gemm_kernel[(plan.splits, tiles)](
        x, weight, out, res, parts, counters,
        rows, n, k, plan.k_per_split,
        x.stride(0), out.stride(0), res.stride(0), parts.stride(0), parts.stride(-2),
        ROWS=SKINNY_MAX_ROWS, BLOCK_N=config.block_n, BLOCK_K=config.block_k, SPLIT_K=plan.splits,
        EVEN_K=k % config.block_k == 0, EPILOGUE=int(epilogue or 0),
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        num_warps=config.num_warps, num_stages=config.num_stages, **pdl_args(x),
    )
    return out
