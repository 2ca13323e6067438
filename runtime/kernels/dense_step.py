"""A whole decode step of a small dense Qwen3 decoder (q/k RMSNorm, SwiGLU; the talker's code predictor) for a few
rows that all sit at the same positions, cache private to the step's caller: one persistent Triton launch on CUDA
(runtime/kernels/dense_step_triton.py), the plain-PyTorch reference otherwise. Imports no triton.

The caller writes the step's input into `buffers.s0` (row-major by row, then position), calls `dense_step`, and
reads the logits of each row's last position; keys and values stay in `buffers.cache` for the next step's positions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import next_power_of_2, use_triton
from runtime.kernels.rmsnorm_reference import qk_norm_rope_reference, rmsnorm_reference

__all__ = ["DENSE_STEP_MAX_TOKENS", "DenseStack", "DenseStepBuffers", "Tiling", "default_tiling", "dense_step",
           "dense_step_fits", "dense_step_reference"]

DENSE_STEP_MAX_TOKENS = 32  # rows x positions a step may carry: the linears pad them to one MMA tile of <= 32 rows
MIN_BLOCK_K = 16
MAX_SPLIT = 4  # Tiling.split_narrow's bound: the partials buffer holds this many


class DenseStack(NamedTuple):
    """Every layer's weights stacked on a leading layer axis (views the model's own modules can share)."""

    qkv: torch.Tensor  # [L, (Hq + 2 Hkv) D, H]
    o: torch.Tensor  # [L, H, Hq D]
    gate_up: torch.Tensor  # [L, 2 I, H]: rows [gate; up]
    down: torch.Tensor  # [L, H, I]
    input_norm: torch.Tensor  # [L, H]
    post_norm: torch.Tensor  # [L, H]
    q_norm: torch.Tensor  # [L, D]
    k_norm: torch.Tensor  # [L, D]
    final_norm: torch.Tensor  # [H]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float

    @property
    def layers(self) -> int:
        return self.qkv.shape[0]

    @property
    def hidden(self) -> int:
        return self.qkv.shape[2]

    @property
    def intermediate(self) -> int:
        return self.down.shape[2]


@dataclass(frozen=True)
class DenseStepBuffers:
    """A step's working memory for up to `max_rows` rows: the residual stream (s0 in and out, s1 between the
    attention and the MLP), the linears' outputs, and the keys and values of `positions` positions per row."""

    s0: torch.Tensor  # [max_tokens, H]
    s1: torch.Tensor
    qkv: torch.Tensor  # [max_tokens, (Hq + 2 Hkv) D]
    attn: torch.Tensor  # [max_tokens, Hq D]
    act: torch.Tensor  # [max_tokens, I]
    cache: torch.Tensor  # [L, 2, max_rows, Hkv, positions, D]
    counter: torch.Tensor  # int32 [2 + H]: the persistent launch's barrier, then split-K arrivals; zero between
    parts: torch.Tensor  # fp32 [MAX_SPLIT, DENSE_STEP_MAX_TOKENS, H]: split-K partials (Tiling.split_narrow)

    @classmethod
    def allocate(cls, stack: DenseStack, max_rows: int, positions: int) -> DenseStepBuffers:
        tokens = min(DENSE_STEP_MAX_TOKENS, 2 * max_rows)
        w = stack.qkv
        heads, kv_heads, d = stack.num_heads, stack.num_kv_heads, stack.head_dim
        empty = lambda *shape: torch.zeros(*shape, dtype=w.dtype, device=w.device)  # noqa: E731
        return cls(empty(tokens, stack.hidden), empty(tokens, stack.hidden), empty(tokens, w.shape[1]),
                   empty(tokens, heads * d), empty(tokens, stack.intermediate),
                   empty(stack.layers, 2, max_rows, kv_heads, positions, d),
                   torch.zeros(2 + stack.hidden, dtype=torch.int32, device=w.device),
                   torch.empty(MAX_SPLIT * DENSE_STEP_MAX_TOKENS * stack.hidden, dtype=torch.float32, device=w.device))

    @property
    def max_rows(self) -> int:
        return self.cache.shape[2]

    @property
    def positions(self) -> int:
        return self.cache.shape[4]


def dense_step_fits(stack: DenseStack, head: torch.Tensor, batch: int, steps: int) -> bool:
    """Whether the persistent kernel runs this shape: <= DENSE_STEP_MAX_TOKENS tokens, power-of-two head dim, every
    width a multiple of the tiles (see `default_tiling`)."""
    return batch * steps <= DENSE_STEP_MAX_TOKENS and default_tiling(stack, head) is not None


def dense_step(
    stack: DenseStack, head: torch.Tensor, buffers: DenseStepBuffers, batch: int, steps: int, start: int,
    cos: torch.Tensor, sin: torch.Tensor, logits: torch.Tensor, persistent: bool = True, tiling: Tiling | None = None,
) -> None:
    """One step: `batch` rows of `steps` new positions each from `start`, input in buffers.s0[:batch * steps];
    writes `logits` [batch, V] (fp32) of each row's last position and the new keys/values into buffers.cache.
    cos/sin [positions, D] by position. `persistent` False (CUDA): one launch per phase, same kernel, no barriers.
    `tiling` None: `default_tiling`'s."""
    _check(stack, head, buffers, batch, steps, start, cos, logits)
    if use_triton(buffers.s0, head) and dense_step_fits(stack, head, batch, steps):
        from runtime.kernels.dense_step_triton import launch_dense_step  # imports triton

        tiling = tiling or default_tiling(stack, head)
        spans = (stack.num_heads * stack.head_dim // tiling.split_narrow, stack.intermediate // tiling.split_narrow)
        if not 1 <= tiling.split_narrow <= MAX_SPLIT or any(k % tiling.block_k for k in spans):
            raise ValueError(f"dense_step: split_narrow={tiling.split_narrow} must be in 1..{MAX_SPLIT} and leave "
                             f"K ranges ({spans}) that are multiples of block_k={tiling.block_k}")
        launch_dense_step(stack, head, buffers, batch, steps, start, cos, sin, logits, tiling, sync=persistent)
        return
    logits.copy_(dense_step_reference(stack, head, buffers, batch, steps, start, cos, sin))


class Tiling(NamedTuple):
    block_n_wide: int  # q/k/v and gate/up outputs per tile
    block_n_narrow: int  # o_proj, down and head outputs per tile
    block_k: int
    # 8 warps: at 4 the attention phase's tiles pushed ptxas past 255 registers into spills (sm_90 compile check)
    num_warps: int = 8
    num_stages: int = 2
    split_narrow: int = 1  # programs sharing each o_proj / down tile's K range (fp32 partials, the last adds them)


def default_tiling(stack: DenseStack, head: torch.Tensor) -> Tiling | None:
    """32-wide tiles for the wide linears and 16-wide for the hidden-sized ones and the head (~one tile per SM at the
    code predictor's dims), K in steps of up to 128 that divide every K; None where the dims do not divide."""
    hidden, inter, d = stack.hidden, stack.intermediate, stack.head_dim
    ks = (hidden, stack.num_heads * d, inter)
    block_k = 128
    while block_k >= MIN_BLOCK_K and any(k % block_k for k in ks):
        block_k //= 2
    wide_ok = stack.qkv.shape[1] % 32 == 0 and inter % 32 == 0
    narrow_ok = hidden % 16 == 0 and head.shape[0] % 16 == 0
    if block_k < MIN_BLOCK_K or not wide_ok or not narrow_ok or d != next_power_of_2(d) or d < 4:
        return None
    # o_proj and down have H / 16 tiles (64 at hidden 1024, for 132 SMs): two programs share each one's K range
    split = 2 if all(k % (2 * block_k) == 0 for k in ks[1:]) else 1
    return Tiling(32, 16, block_k, num_stages=3, split_narrow=split)


def _check(stack: DenseStack, head: torch.Tensor, buffers: DenseStepBuffers, batch: int, steps: int, start: int,
           cos: torch.Tensor, logits: torch.Tensor) -> None:  # fmt: skip
    if not 1 <= batch <= buffers.max_rows:
        raise ValueError(f"dense_step: batch={batch} must be in 1..{buffers.max_rows} (the buffers' rows)")
    if batch * steps > buffers.s0.shape[0]:
        raise ValueError(f"dense_step: {batch} rows x {steps} positions exceed the buffers' {buffers.s0.shape[0]}")
    if not 0 <= start or start + steps > min(buffers.positions, cos.shape[0]):
        raise ValueError(f"dense_step: positions {start}..{start + steps - 1} exceed the cache's "
                         f"{buffers.positions} or the rotary table's {cos.shape[0]}")
    if stack.num_heads % stack.num_kv_heads:
        raise ValueError(f"dense_step: {stack.num_heads} query heads do not group over {stack.num_kv_heads}")
    if logits.shape != (batch, head.shape[0]) or logits.dtype != torch.float32:
        raise ValueError(f"dense_step: logits must be float32 [{batch}, {head.shape[0]}], got "
                         f"{logits.dtype} {list(logits.shape)}")


def dense_step_reference(
    stack: DenseStack, head: torch.Tensor, buffers: DenseStepBuffers, batch: int, steps: int, start: int,
    cos: torch.Tensor, sin: torch.Tensor,
) -> torch.Tensor:
    """`dense_step` in plain PyTorch, rounding as the model's modules do; returns the logits [batch, V] (fp32)."""
    heads, kv_heads, d, eps = stack.num_heads, stack.num_kv_heads, stack.head_dim, stack.eps
    tokens, end = batch * steps, start + steps
    s = buffers.s0[:tokens]
    rope = (cos[start:end].repeat(batch, 1), sin[start:end].repeat(batch, 1))
    allowed = torch.arange(end, device=s.device)[None, :] <= torch.arange(start, end, device=s.device)[:, None]
    for layer in range(stack.layers):
        qkv = F.linear(rmsnorm_reference(s, stack.input_norm[layer], eps), stack.qkv[layer])
        q, k, v = qkv.split((heads * d, kv_heads * d, kv_heads * d), dim=-1)
        q, k = qk_norm_rope_reference(q.view(tokens, heads, d), k.view(tokens, kv_heads, d), stack.q_norm[layer],
                                      stack.k_norm[layer], *rope, eps)
        cache = buffers.cache[layer, :, :batch]  # [2, B, Hkv, P, D]
        cache[0, :, :, start:end] = k.view(batch, steps, kv_heads, d).transpose(1, 2)
        cache[1, :, :, start:end] = v.view(batch, steps, kv_heads, d).transpose(1, 2)
        keys, values = (cache[i, :, :, :end].repeat_interleave(heads // kv_heads, dim=1) for i in (0, 1))
        attn = F.scaled_dot_product_attention(q.view(batch, steps, heads, d).transpose(1, 2), keys, values,
                                              attn_mask=allowed, scale=1 / math.sqrt(d))
        s = s + F.linear(attn.transpose(1, 2).reshape(tokens, heads * d), stack.o[layer])
        gate, up = F.linear(rmsnorm_reference(s, stack.post_norm[layer], eps), stack.gate_up[layer]).chunk(2, -1)
        s = s + F.linear(F.silu(gate) * up, stack.down[layer])
    last = s.view(batch, steps, -1)[:, -1]
    return F.linear(rmsnorm_reference(last, stack.final_norm, eps), head).float()
