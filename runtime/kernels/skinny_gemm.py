"""Skinny GEMM for decode-time linears: y = x @ W^T for at most SKINNY_MAX_ROWS rows, optionally with SwiGLU's
silu(gate) * up or a residual add fused in; one Triton launch on CUDA in bf16/fp16, the PyTorch reference otherwise.

At 1-16 rows a linear only streams its weight, so the kernel reads it once with enough programs to fill every SM
(`skinny_config`): by output tiles, and for narrow outputs also by K (fp32 partials that the tile's last program
sums in split order, so results are deterministic run to run). Everything here imports no triton.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

import torch
import torch.nn.functional as F

from runtime.kernels._backend import next_power_of_2, use_triton

__all__ = ["SKINNY_MAX_ROWS", "Epilogue", "SkinnyConfig", "check_config", "skinny_config", "skinny_linear",
           "skinny_linear_reference", "split_plan"]

SKINNY_MAX_ROWS = 16  # the kernel pads the rows to one 16-row MMA tile; more rows belong to a real GEMM
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# The split-K rule: a split streams at least this many K columns of its tile (fewer cost more in partials and
# arrivals than they add in parallel reads), and a tile is split this many ways at most.
MIN_SPLIT_K = 256
MAX_SPLIT_K = 16


class Epilogue(enum.IntEnum):
    """What the kernel does with x @ W^T (fp32) before its one rounding to x's dtype; the values are the kernel's."""

    SILU_MUL = 1  # W is [gate; up] (2I, K), rows stacked as in the fused gate_up weights: silu(x@Wg^T) * (x@Wu^T)
    RESIDUAL = 2  # residual + x @ W^T, residual (M, N)


class SkinnyConfig(NamedTuple):
    """One launch's tiling: BLOCK_N outputs per program (of each half with SILU_MUL), K in BLOCK_K steps, K split
    `split_k` ways (1: no partials)."""

    block_n: int
    block_k: int
    split_k: int
    num_warps: int
    num_stages: int


def _is_power_of_2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def check_config(config: SkinnyConfig) -> None:
    """Raise ValueError on a tiling the kernel cannot run (tl.dot needs power-of-two tiles of at least 16)."""
    for field in ("block_n", "block_k"):
        value = getattr(config, field)
        if value < 16 or not _is_power_of_2(value):
            raise ValueError(f"SkinnyConfig.{field}={value}: must be a power of two >= 16")
    if not 1 <= config.split_k <= MAX_SPLIT_K:
        raise ValueError(f"SkinnyConfig.split_k={config.split_k}: must be in 1..{MAX_SPLIT_K}")
    if not _is_power_of_2(config.num_warps) or config.num_warps > 16:
        raise ValueError(f"SkinnyConfig.num_warps={config.num_warps}: must be 1, 2, 4, 8 or 16")
    if config.num_stages < 1:
        raise ValueError(f"SkinnyConfig.num_stages={config.num_stages}: must be >= 1")


class SplitPlan(NamedTuple):
    splits: int  # used splits: none of them empty
    k_per_split: int  # K columns per split, a multiple of BLOCK_K (the last split may get fewer)


def split_plan(k: int, block_k: int, split_k: int) -> SplitPlan:
    """Cut K into at most `split_k` runs of whole BLOCK_K steps, as even as they come, dropping runs left empty
    (K = 8 steps split 5 ways is 4 runs of 2)."""
    steps = -(-k // block_k)
    per_split = -(-steps // max(1, min(split_k, steps)))
    return SplitPlan(-(-steps // per_split), per_split * block_k)


def skinny_config(out_cols: int, weight_rows: int, k: int, num_sms: int, element_size: int = 2) -> SkinnyConfig:
    """The default tiling for `out_cols` outputs from a (weight_rows, k) weight (weight_rows = 2 * out_cols with
    SILU_MUL): 64-wide tiles where they alone fill the SMs, else 32-wide ones; tiles that leave more than a tenth
    of the SMs idle are split over K until there are about two programs an SM (each split >= MIN_SPLIT_K columns);
    K in 256-wide steps, 128-wide where those split K more ways (4 steps of 256 split 3 ways only as 2); as many
    pipeline stages as keep one program's tiles within ~100 KB of shared memory (two programs an SM).

    On an H100 at Qwen3-ASR's shapes (bench_skinny_gemm.py --sweep, bench/kernels/NOTES.md) 128 tiles unsplit beat
    two splits by 10%, and 64 tiles split 4 ways beat 3 ways by 6-14%: the split pays only where the tiles alone
    leave SMs idle, and then up to the two programs an SM that its shared memory holds."""
    block_n = 64 if -(-out_cols // 64) >= num_sms else 32
    tiles = -(-out_cols // block_n)
    want = 1 if 10 * tiles >= 9 * num_sms else min(-(-2 * num_sms // tiles), max(1, k // MIN_SPLIT_K), MAX_SPLIT_K)
    block_k = min(256, max(16, next_power_of_2(k)))
    splits = split_plan(k, block_k, want).splits
    if block_k == 256 and split_plan(k, 128, want).splits > splits:
        block_k, splits = 128, split_plan(k, 128, want).splits
    halves = weight_rows // out_cols
    stage_bytes = (SKINNY_MAX_ROWS + halves * block_n) * block_k * element_size
    num_stages = max(2, min(4, 1 + (100 << 10) // stage_bytes))  # Triton buffers num_stages - 1 steps
    return SkinnyConfig(block_n, block_k, splits, 4, num_stages)


def skinny_linear_reference(
    x: torch.Tensor, weight: torch.Tensor, epilogue: Epilogue | None = None, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """x (M, K) @ weight (N, K)^T in fp32, the epilogue in fp32, one rounding to x's dtype: (M, N), or (M, N / 2)
    with SILU_MUL."""
    y = x.float() @ weight.float().T  # (M, N)
    if epilogue is Epilogue.SILU_MUL:
        gate, up = y.chunk(2, dim=-1)
        y = F.silu(gate) * up
    elif epilogue is Epilogue.RESIDUAL:
        assert residual is not None
        y = y + residual.float()
    return y.to(x.dtype)


def _check_inputs(
    x: torch.Tensor, weight: torch.Tensor, epilogue: Epilogue | None, residual: torch.Tensor | None
) -> None:
    if x.dim() != 2 or weight.dim() != 2:
        raise ValueError(f"skinny_linear takes x (M, K) and weight (N, K); got {tuple(x.shape)}, {tuple(weight.shape)}")
    rows, k = x.shape
    if rows > SKINNY_MAX_ROWS:
        raise ValueError(f"skinny_linear takes at most SKINNY_MAX_ROWS={SKINNY_MAX_ROWS} rows, got {rows}: "
                         "use F.linear")
    if weight.shape[1] != k:
        raise ValueError(f"x has K={k} columns but weight {tuple(weight.shape)} has {weight.shape[1]}")
    if x.dtype not in FLOAT_DTYPES or weight.dtype != x.dtype:
        raise ValueError(f"x and weight must share one of {FLOAT_DTYPES}; got {x.dtype} and {weight.dtype}")
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device}, weight on {weight.device}: put them on one device")
    if x.stride(1) != 1 and k > 1:
        raise ValueError(f"x must have unit stride along K (any row stride); got strides {x.stride()}")
    if not weight.is_contiguous():
        raise ValueError("weight must be contiguous (N, K); a row slice of a contiguous weight is")
    if epilogue is Epilogue.SILU_MUL and weight.shape[0] % 2:
        raise ValueError(f"SILU_MUL needs a stacked [gate; up] weight of 2I rows; got {weight.shape[0]} rows")
    if (epilogue is Epilogue.RESIDUAL) != (residual is not None):
        raise ValueError("pass `residual` exactly when epilogue is Epilogue.RESIDUAL")
    if residual is not None:
        want = (rows, weight.shape[0])
        if tuple(residual.shape) != want or residual.dtype != x.dtype or residual.device != x.device:
            raise ValueError(f"residual must be {want} {x.dtype} on {x.device}; got {tuple(residual.shape)} "
                             f"{residual.dtype} on {residual.device}")
        if residual.stride(1) != 1 and want[1] > 1:
            raise ValueError(f"residual must have unit stride along N; got strides {residual.stride()}")


def skinny_linear(
    x: torch.Tensor, weight: torch.Tensor, epilogue: Epilogue | None = None, residual: torch.Tensor | None = None,
    config: SkinnyConfig | None = None,
) -> torch.Tensor:
    """`skinny_linear_reference` in one Triton launch for CUDA bf16/fp16 tensors (the reference otherwise).

    x (M <= SKINNY_MAX_ROWS, K) with unit stride along K, weight (N, K) contiguous, the same dtype; `residual`
    (M, N) exactly with Epilogue.RESIDUAL. `config` overrides `skinny_config`'s tiling (benchmarks sweep it).
    A split-K launch (the default for narrow outputs) uses per-device arrival counters: the first call of a process
    must run outside CUDA-graph capture, and split-K calls must not run on two streams at once.
    """
    _check_inputs(x, weight, epilogue, residual)
    if config is not None:
        check_config(config)
    if use_triton(x, weight) and x.numel() and weight.numel():
        from runtime.kernels.skinny_gemm_triton import skinny_gemm_triton  # imports triton

        return skinny_gemm_triton(x, weight, epilogue, residual, config)
    return skinny_linear_reference(x, weight, epilogue, residual)
