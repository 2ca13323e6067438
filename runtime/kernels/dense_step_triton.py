"""One persistent Triton launch for a whole decode step of a small dense Qwen3 decoder (the talker's code predictor):
every layer's q/k/v, attention, o_proj, gate/up and down, then the final norm and the LM head.

A launch-bound step of ~50 kernels of a few microseconds each becomes one launch whose programs stay resident and
meet at a grid-wide barrier between phases: each phase needs every row's whole output of the one before (a norm, a
GEMV's input), so its programs wait for all of them. A barrier is one atomic arrival and a spin on an L2 counter
(~1 us) where a kernel boundary costs a drain, a launch and a ramp-up (~3-4 us, bench/kernels/NOTES.md). Measured
on an H100 it is still slower than the layer-by-layer path (each phase costs 7.5-10 us whatever its bytes; run 12
there), so the talker uses it only when asked (`FrameStep.set_dense_rows`).

Phases, for layer l (5 l + ...):
  0 qkv     RMSNorm(s0) * input_norm @ W_qkv^T                                      -> qkv
  1 attn    q/k RMSNorm + rotary, k/v into this frame's cache, attention          -> attn
  2 o       s1 = s0 + attn @ W_o^T                                                  -> s1
  3 gate_up silu(RMSNorm(s1) * post_norm @ W_gate^T) * (... @ W_up^T)                -> act
  4 down    s0 = s1 + act @ W_down^T                                                -> s0
then 5 L: RMSNorm(each row's last position of s0) * final_norm @ W_head^T -> logits (fp32).
o and down (H / BLOCK_N tiles, fewer than the SMs) may split each tile's K range over programs (`Tiling.split_narrow`).
Intermediate values round to the activations' dtype where the model's own modules do (each linear's output, the
normed input before its weight, the residual sums), so the step tracks the layer-by-layer path's numbers.

Programs co-operate only through global memory written in an earlier phase; those loads bypass L1 (".cg"), whose
lines are not kept coherent across SMs. The grid never exceeds the SM count, so every program is resident and the
barrier cannot wait on a program that has not started. `SYNC=False` runs the given phases without barriers: one
launch per phase (the interpreter runs programs one after another, where a barrier would never open).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from runtime.kernels._backend import next_power_of_2
from runtime.kernels.dense_step import DenseStack, DenseStepBuffers, Tiling
from runtime.kernels.paged_attention_triton import num_sms

PHASES_PER_LAYER = 5
# the jitted kernel reads module globals only as constexprs
QKV, ATTN, O_PROJ, GATE_UP = (tl.constexpr(i) for i in range(4))  # then DOWN
# linear epilogues
STORE = tl.constexpr(0)  # the product, rounded to the activations' dtype, into out (any dtype)
SILU_MUL = tl.constexpr(1)  # silu(gate) * up from the stacked [gate; up] weight
RESIDUAL = tl.constexpr(2)  # residual + the product


@triton.jit
def _grid_sync(counter_ptr, target):
    """Every program arrives (after all its threads' stores), then waits until `target` arrivals are counted."""
    tl.debug_barrier()
    tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")
    while tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu") < target:
        pass
    tl.debug_barrier()


@triton.jit
def _row_rstd(row_ptrs, row_ok, eps, K: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """1 / rms of each row's K values, in fp32."""
    offs_k = tl.arange(0, BLOCK_K)
    squares = tl.zeros([ROWS], dtype=tl.float32)
    for k0 in tl.static_range(0, K, BLOCK_K):  # unrolled: the loads go out together, not one latency each
        a = tl.load(row_ptrs[:, None] + k0 + offs_k[None, :], mask=row_ok[:, None], other=0.0,
                    cache_modifier=".cg").to(tl.float32)
        squares += tl.sum(a * a, axis=1)
    return tl.rsqrt(squares / K + eps)


@triton.jit
def _linear(
    row_ptrs, row_ok, norm_ptr, eps, w_ptr, out_ptrs, res_ptrs, part_ptr, tile_counters, pid, nprog,
    N: tl.constexpr, K: tl.constexpr, NORM: tl.constexpr, EPILOGUE: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, PRECISION: tl.constexpr,
):
    """out[r, n] for the program's tiles of BLOCK_N outputs: x @ W^T over rows `row_ptrs` (x the rows themselves, or
    with NORM their RMSNorm times norm_ptr's weight), W [N, K] (with SILU_MUL [2N, K]), epilogue as named.

    SPLIT > 1 (not with SILU_MUL) gives each tile's K range to SPLIT programs, so a linear of few output tiles (o_proj
    and down: H / BLOCK_N of them) keeps every SM streaming: each stores its fp32 partial in part_ptr
    [SPLIT, ROWS, N] and counts its arrival in tile_counters; the tile's last program adds the partials in split
    order (the same sums whichever arrives last), runs the epilogue and zeroes the counter."""
    dt = w_ptr.dtype.element_ty
    offs_k = tl.arange(0, BLOCK_K)
    span: tl.constexpr = K // SPLIT
    if NORM:
        rstd = _row_rstd(row_ptrs, row_ok, eps, K, ROWS, BLOCK_K)
    for item in range(pid, N // BLOCK_N * SPLIT, nprog):
        tile = item // SPLIT
        k_lo = (item % SPLIT) * span
        cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        w_ptrs = w_ptr + cols[None, :].to(tl.int64) * K + offs_k[:, None]  # [BLOCK_K, BLOCK_N]: W^T's tile
        acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        acc_up = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        for k0 in range(k_lo, k_lo + span, BLOCK_K):
            a = tl.load(row_ptrs[:, None] + k0 + offs_k[None, :], mask=row_ok[:, None], other=0.0,
                        cache_modifier=".cg")
            if NORM:  # the model rounds the normed row, then multiplies by the weight in its dtype
                a = (a.to(tl.float32) * rstd[:, None]).to(dt) * tl.load(norm_ptr + k0 + offs_k)[None, :]
            a = a.to(dt)
            acc = tl.dot(a, tl.load(w_ptrs + k0), acc, input_precision=PRECISION)
            if EPILOGUE == SILU_MUL:
                acc_up = tl.dot(a, tl.load(w_ptrs + N * K + k0), acc_up, input_precision=PRECISION)
        if SPLIT == 1:
            _epilogue(acc, acc_up, out_ptrs, res_ptrs, row_ok, cols, dt, EPILOGUE)
        else:
            parts = part_ptr + tl.arange(0, ROWS)[:, None] * N + cols[None, :]
            tl.store(parts + (item % SPLIT) * ROWS * N, acc)
            tl.debug_barrier()  # every thread's partial is stored before the arrival releases them
            if tl.atomic_add(tile_counters + tile, 1, sem="acq_rel", scope="gpu") == SPLIT - 1:
                acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
                for split in range(SPLIT):
                    acc += tl.load(parts + split * ROWS * N, cache_modifier=".cg")
                _epilogue(acc, acc_up, out_ptrs, res_ptrs, row_ok, cols, dt, EPILOGUE)
                tl.store(tile_counters + tile, 0)


@triton.jit
def _epilogue(acc, acc_up, out_ptrs, res_ptrs, row_ok, cols, dt: tl.constexpr, EPILOGUE: tl.constexpr):
    """A tile's fp32 products rounded to the activations' dtype, through the epilogue, stored (masked to the rows)."""
    y = acc.to(dt).to(tl.float32)
    if EPILOGUE == SILU_MUL:
        y = (y * tl.sigmoid(y)).to(dt).to(tl.float32) * acc_up.to(dt).to(tl.float32)
    if EPILOGUE == RESIDUAL:
        y += tl.load(res_ptrs[:, None] + cols[None, :], mask=row_ok[:, None], other=0.0,
                     cache_modifier=".cg").to(tl.float32)
    out = out_ptrs[:, None] + cols[None, :]
    tl.store(out, y.to(dt).to(out.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _norm_rope(x1, x2, w_ptr, cos_ptr, sin_ptr, eps, D: tl.constexpr):
    """Per-head RMSNorm (rounded, times the weight in the activations' dtype) then rotate-half rotary of one head
    given as its two halves; returns the rotated halves in fp32."""
    dt = w_ptr.dtype.element_ty
    half = tl.arange(0, D // 2)
    rstd = tl.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
    n1 = ((x1 * rstd).to(dt) * tl.load(w_ptr + half)).to(tl.float32)
    n2 = ((x2 * rstd).to(dt) * tl.load(w_ptr + D // 2 + half)).to(tl.float32)
    c1, c2 = tl.load(cos_ptr + half).to(tl.float32), tl.load(cos_ptr + D // 2 + half).to(tl.float32)
    s1, s2 = tl.load(sin_ptr + half).to(tl.float32), tl.load(sin_ptr + D // 2 + half).to(tl.float32)
    return n1 * c1 - n2 * s1, n2 * c2 + n1 * s2


@triton.jit
def _attention(
    qkv_ptr, attn_ptr, cache_ptr, q_norm_ptr, k_norm_ptr, cos_ptr, sin_ptr, start, batch, eps, scale, pid, nprog,
    max_rows, STEPS: tl.constexpr, HQ: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, P: tl.constexpr,
):
    """One (row, kv head) at a time: its new keys and values (STEPS positions from `start`) normed, rotated and
    stored in the cache [2, max_rows, KVH, P, D], then its query heads' attention over positions 0..own."""
    dt = attn_ptr.dtype.element_ty
    group: tl.constexpr = HQ // KVH
    width: tl.constexpr = (HQ + 2 * KVH) * D
    half = tl.arange(0, D // 2)
    pos = tl.arange(0, P)
    for item in range(pid, batch * KVH, nprog):
        b = item // KVH
        g = item % KVH
        keys = cache_ptr + ((b * KVH + g) * P).to(tl.int64) * D
        values = keys + max_rows * KVH * P * D
        for t in tl.static_range(STEPS):
            row = qkv_ptr + (b * STEPS + t) * width
            at = (start + t) * D
            k1 = tl.load(row + (HQ + g) * D + half, cache_modifier=".cg").to(tl.float32)
            k2 = tl.load(row + (HQ + g) * D + D // 2 + half, cache_modifier=".cg").to(tl.float32)
            k1, k2 = _norm_rope(k1, k2, k_norm_ptr, cos_ptr + (start + t) * D, sin_ptr + (start + t) * D, eps, D)
            tl.store(keys + at + half, k1.to(dt))
            tl.store(keys + at + D // 2 + half, k2.to(dt))
            v = row + (HQ + KVH + g) * D
            tl.store(values + at + half, tl.load(v + half, cache_modifier=".cg"))
            tl.store(values + at + D // 2 + half, tl.load(v + D // 2 + half, cache_modifier=".cg"))
        tl.debug_barrier()  # the stores above, by other threads of this program, come before the loads below
        cached = (pos < start + STEPS)[:, None]
        key_tile = keys + pos[:, None] * D + half[None, :]  # [P, D / 2]: the first halves; + D / 2 the second
        value_tile = values + pos[:, None] * D + half[None, :]
        for query in range(STEPS * group):  # a loop, not unrolled: one head's tiles live at a time
            step = query // group
            head = g * group + query % group
            row = qkv_ptr + (b * STEPS + step) * width + head * D
            q1 = tl.load(row + half, cache_modifier=".cg").to(tl.float32)
            q2 = tl.load(row + D // 2 + half, cache_modifier=".cg").to(tl.float32)
            q1, q2 = _norm_rope(q1, q2, q_norm_ptr, cos_ptr + (start + step) * D, sin_ptr + (start + step) * D, eps, D)
            s = tl.sum(_tile(key_tile, cached) * q1.to(dt).to(tl.float32)[None, :], axis=1)
            s += tl.sum(_tile(key_tile + D // 2, cached) * q2.to(dt).to(tl.float32)[None, :], axis=1)
            s = tl.where(pos <= start + step, s * scale, float("-inf"))
            p = tl.exp(s - tl.max(s, axis=0))
            p = (p / tl.sum(p, axis=0))[:, None]
            out = attn_ptr + (b * STEPS + step) * HQ * D + head * D
            tl.store(out + half, tl.sum(p * _tile(value_tile, cached), axis=0).to(dt))
            tl.store(out + D // 2 + half, tl.sum(p * _tile(value_tile + D // 2, cached), axis=0).to(dt))


@triton.jit
def _tile(ptrs, mask):
    """A cache tile, in fp32, read from L2 (this phase's own stores are there; L1 may hold an older frame's)."""
    return tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)


@triton.jit(do_not_specialize=["batch", "start", "phase_lo", "phase_hi"])
def dense_step_kernel(
    s0_ptr, s1_ptr, qkv_ptr, attn_ptr, act_ptr, cache_ptr, logits_ptr, counter_ptr, part_ptr,
    w_qkv, w_o, w_gate_up, w_down, input_norm, post_norm, q_norm, k_norm, final_norm, w_head, cos_ptr, sin_ptr,
    batch, start, phase_lo, phase_hi, max_rows, eps, scale,
    LAYERS: tl.constexpr, H: tl.constexpr, HQ: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr,
    INTER: tl.constexpr, VOCAB: tl.constexpr, P: tl.constexpr, STEPS: tl.constexpr, ROWS: tl.constexpr,
    BLOCK_N_WIDE: tl.constexpr, BLOCK_N_NARROW: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_NARROW: tl.constexpr,
    LAYER_PHASES: tl.constexpr, SYNC: tl.constexpr, PRECISION: tl.constexpr,
):
    """Phases [phase_lo, phase_hi) of a step of `batch` rows, STEPS new positions each from `start` (token m =
    row * STEPS + position, M = batch * STEPS <= ROWS), the step's input in s0 [M, H]; see the module docstring.

    s0/s1 [>= M, H], qkv [>= M, (HQ + 2 KVH) D], attn [>= M, HQ D], act [>= M, INTER]; weights stacked by layer;
    cos/sin [P, D] by position; logits [batch, VOCAB] fp32; counter_ptr int32 zeros (the barrier's two, then one
    per narrow tile; left zero again); part_ptr fp32 [SPLIT_NARROW, ROWS, H] (SPLIT_NARROW > 1 only)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    width: tl.constexpr = (HQ + 2 * KVH) * D
    rows = tl.arange(0, ROWS)
    row_ok = rows < batch * STEPS
    s0_rows = s0_ptr + rows * H
    s1_rows = s1_ptr + rows * H
    tiles_ptr = counter_ptr + 2  # split-K arrivals, one per narrow tile
    for phase in range(phase_lo, phase_hi):
        layer = phase // LAYER_PHASES
        kind = phase - layer * LAYER_PHASES
        if layer == LAYERS:  # each row's last position through the final norm and the head
            last = s0_ptr + (rows * STEPS + STEPS - 1) * H
            _linear(last, rows < batch, final_norm, eps, w_head, logits_ptr + rows * VOCAB, last, part_ptr,
                    tiles_ptr, pid, nprog, VOCAB, H, True, STORE, ROWS, BLOCK_N_NARROW, BLOCK_K, 1, PRECISION)
        elif kind == QKV:
            _linear(s0_rows, row_ok, input_norm + layer * H, eps, w_qkv + layer.to(tl.int64) * width * H,
                    qkv_ptr + rows * width, s0_rows, part_ptr, tiles_ptr, pid, nprog,
                    width, H, True, STORE, ROWS, BLOCK_N_WIDE, BLOCK_K, 1, PRECISION)
        elif kind == ATTN:
            _attention(qkv_ptr, attn_ptr, cache_ptr + layer.to(tl.int64) * 2 * max_rows * KVH * P * D,
                       q_norm + layer * D, k_norm + layer * D, cos_ptr, sin_ptr, start, batch, eps, scale, pid,
                       nprog, max_rows, STEPS, HQ, KVH, D, P)
        elif kind == O_PROJ:
            _linear(attn_ptr + rows * HQ * D, row_ok, input_norm, eps, w_o + layer.to(tl.int64) * H * HQ * D,
                    s1_rows, s0_rows, part_ptr, tiles_ptr, pid, nprog, H, HQ * D, False, RESIDUAL, ROWS,
                    BLOCK_N_NARROW, BLOCK_K, SPLIT_NARROW, PRECISION)
        elif kind == GATE_UP:
            _linear(s1_rows, row_ok, post_norm + layer * H, eps, w_gate_up + layer.to(tl.int64) * 2 * INTER * H,
                    act_ptr + rows * INTER, s1_rows, part_ptr, tiles_ptr, pid, nprog,
                    INTER, H, True, SILU_MUL, ROWS, BLOCK_N_WIDE, BLOCK_K, 1, PRECISION)
        else:
            _linear(act_ptr + rows * INTER, row_ok, input_norm, eps, w_down + layer.to(tl.int64) * H * INTER,
                    s0_rows, s1_rows, part_ptr, tiles_ptr, pid, nprog, H, INTER, False, RESIDUAL, ROWS,
                    BLOCK_N_NARROW, BLOCK_K, SPLIT_NARROW, PRECISION)
        if SYNC:
            if phase + 1 < phase_hi:
                _grid_sync(counter_ptr, nprog * (phase + 1 - phase_lo))
    if SYNC:  # the last program out zeroes both counters: nobody is still waiting on the barrier then
        tl.debug_barrier()
        if tl.atomic_add(counter_ptr + 1, 1, sem="acq_rel", scope="gpu") == nprog - 1:
            tl.store(counter_ptr, 0)
            tl.store(counter_ptr + 1, 0)



def launch_dense_step(
    stack: DenseStack, head: torch.Tensor, buffers: DenseStepBuffers, batch: int, steps: int, start: int,
    cos: torch.Tensor, sin: torch.Tensor, logits: torch.Tensor, tiling: Tiling, sync: bool = True,
    programs: int | None = None,
) -> None:
    """`dense_step` on the GPU (or the interpreter, sync False): one launch of every phase with barriers, or one
    launch per phase. `programs` None: one per SM, fewer where no phase has that much work."""
    hidden, inter, d = stack.hidden, stack.intermediate, stack.head_dim
    heads, kv_heads = stack.num_heads, stack.num_kv_heads
    if programs is None:
        work = (stack.qkv.shape[1] // tiling.block_n_wide, inter // tiling.block_n_wide,
                hidden // tiling.block_n_narrow * tiling.split_narrow, head.shape[0] // tiling.block_n_narrow,
                batch * kv_heads)
        programs = min(num_sms(buffers.s0.device.index or 0), max(work))
    phases = stack.layers * PHASES_PER_LAYER + 1
    spans = [(0, phases)] if sync else [(p, p + 1) for p in range(phases)]
    for lo, hi in spans:
        dense_step_kernel[(programs,)](
            buffers.s0, buffers.s1, buffers.qkv, buffers.attn, buffers.act, buffers.cache, logits, buffers.counter,
            buffers.parts,
            stack.qkv, stack.o, stack.gate_up, stack.down, stack.input_norm, stack.post_norm, stack.q_norm,
            stack.k_norm, stack.final_norm, head, cos, sin,
            batch, start, lo, hi, buffers.max_rows, stack.eps, 1 / math.sqrt(d),
            LAYERS=stack.layers, H=hidden, HQ=heads, KVH=kv_heads, D=d, INTER=inter, VOCAB=head.shape[0],
            P=buffers.positions, STEPS=steps, ROWS=max(16, next_power_of_2(batch * steps)),
            BLOCK_N_WIDE=tiling.block_n_wide, BLOCK_N_NARROW=tiling.block_n_narrow, BLOCK_K=tiling.block_k,
            SPLIT_NARROW=tiling.split_narrow,
            LAYER_PHASES=PHASES_PER_LAYER, SYNC=sync,
            PRECISION="ieee" if buffers.s0.dtype == torch.float32 else "tf32",
            num_warps=tiling.num_warps, num_stages=tiling.num_stages,
        )  # fmt: skip
