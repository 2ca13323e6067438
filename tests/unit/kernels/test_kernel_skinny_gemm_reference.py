"""Skinny GEMM without triton: the reference's arithmetic, the dispatch's input checks (every error branch), the
config checks, the split plan and the default tiling rule at the Talker's and Thinker's shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runtime.kernels.activation import silu_mul_reference
from runtime.kernels.skinny_gemm import (
    MAX_SPLIT_K, MIN_SPLIT_K, SKINNY_MAX_ROWS, Epilogue, SkinnyConfig, check_config, skinny_config, skinny_linear,
    skinny_linear_reference, split_plan,
)

H200_SMS = 132
# (weight rows, K, epilogue) of the decode linears: code predictor qkv, o, gate_up, down, lm head; talker qkv,
# shared expert gate_up(+gate), its down, codec head; thinker q, k/v, fused qkv, o
SHAPES = [(4096, 1024, None), (1024, 2048, None), (6144, 1024, Epilogue.SILU_MUL), (1024, 3072, None),
          (2048, 1024, None), (2560, 1024, None), (1544, 1024, None), (1024, 768, None), (3072, 1024, None),
          (4096, 2048, None), (512, 2048, None), (5120, 2048, None), (2048, 4096, None)]


def operands(rows: int, n: int, k: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    return x, w, torch.randn(rows, n, generator=gen).to(dtype)


def test_reference_is_an_fp32_linear_and_its_epilogues() -> None:
    x, w, res = operands(3, 24, 40)
    torch.testing.assert_close(skinny_linear_reference(x, w), F.linear(x, w), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(skinny_linear_reference(x, w, Epilogue.SILU_MUL), silu_mul_reference(F.linear(x, w)),
                               rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(skinny_linear_reference(x, w, Epilogue.RESIDUAL, res), res + F.linear(x, w),
                               rtol=1e-6, atol=1e-6)


def test_reference_rounds_once_into_the_input_dtype() -> None:
    x, w, res = (t.to(torch.bfloat16) for t in operands(2, 16, 64))
    got = skinny_linear_reference(x, w, Epilogue.RESIDUAL, res)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, (res.float() + x.float() @ w.float().T).to(torch.bfloat16))


def test_cpu_dispatch_takes_the_reference_with_strided_rows() -> None:
    wide, w, _ = operands(4, 8, 48, torch.bfloat16)
    x = wide[:, 8:]  # rows of a wider buffer: row stride 48
    assert torch.equal(skinny_linear(x, w[:, :40].contiguous()), skinny_linear_reference(x, w[:, :40].contiguous()))
    assert skinny_linear(x[:0], w[:, :40].contiguous()).shape == (0, 8)


@pytest.mark.parametrize(("make", "match"), [
    (lambda x, w, r: (x[0], w), "takes x"),
    (lambda x, w, r: (x[:1].expand(SKINNY_MAX_ROWS + 1, -1), w), "SKINNY_MAX_ROWS"),
    (lambda x, w, r: (x[:, :8], w), "columns"),
    (lambda x, w, r: (x.double(), w.double()), "share one of"),
    (lambda x, w, r: (x, w.half()), "share one of"),
    (lambda x, w, r: (x, w.to("meta")), "one device"),
    (lambda x, w, r: (x.T.contiguous().T, w), "unit stride along K"),
    (lambda x, w, r: (x, w.T.contiguous().T), "contiguous"),
])
def test_dispatch_rejects_bad_operands(make, match: str) -> None:  # noqa: ANN001
    x, w, res = operands(2, 12, 16)
    with pytest.raises(ValueError, match=match):
        skinny_linear(*make(x, w, res))


def test_dispatch_rejects_bad_epilogue_operands() -> None:
    x, w, res = operands(2, 12, 16)
    with pytest.raises(ValueError, match="2I rows"):
        skinny_linear(x, w[:11].contiguous(), Epilogue.SILU_MUL)
    with pytest.raises(ValueError, match="exactly when"):
        skinny_linear(x, w, Epilogue.RESIDUAL)
    with pytest.raises(ValueError, match="exactly when"):
        skinny_linear(x, w, None, res)
    for bad in (res[:, :6], res.half(), res.to("meta")):
        with pytest.raises(ValueError, match="residual must be"):
            skinny_linear(x, w, Epilogue.RESIDUAL, bad)
    with pytest.raises(ValueError, match="unit stride along N"):
        skinny_linear(x, w, Epilogue.RESIDUAL, res.T.contiguous().T)


@pytest.mark.parametrize(("config", "match"), [
    (SkinnyConfig(24, 64, 1, 4, 3), "block_n"), (SkinnyConfig(32, 8, 1, 4, 3), "block_k"),
    (SkinnyConfig(32, 64, 0, 4, 3), "split_k"), (SkinnyConfig(32, 64, MAX_SPLIT_K + 1, 4, 3), "split_k"),
    (SkinnyConfig(32, 64, 1, 3, 3), "num_warps"), (SkinnyConfig(32, 64, 1, 4, 0), "num_stages"),
])
def test_config_checks(config: SkinnyConfig, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_config(config)
    x, w, _ = operands(1, 8, 16)
    with pytest.raises(ValueError, match=match):
        skinny_linear(x, w, config=config)


def test_split_plan_leaves_no_split_empty() -> None:
    assert split_plan(2048, 256, 5) == (4, 512)  # 8 steps 5 ways: 4 runs of 2
    assert split_plan(72, 32, 2) == (2, 64)  # 3 steps: 2 + 1 (the last one partial)
    assert split_plan(72, 32, 16) == (3, 32)  # never more splits than steps
    assert split_plan(100, 128, 1) == (1, 128)
    for k in range(1, 300, 7):
        for split in (1, 2, 3, 5, 8):
            splits, per = split_plan(k, 32, split)
            assert splits <= split and per % 32 == 0 and (splits - 1) * per < k <= splits * per


@pytest.mark.parametrize(("weight_rows", "k", "epilogue"), SHAPES)
def test_default_tiling_fills_the_h200(weight_rows: int, k: int, epilogue: Epilogue | None) -> None:
    out_cols = weight_rows // 2 if epilogue is Epilogue.SILU_MUL else weight_rows
    cfg = skinny_config(out_cols, weight_rows, k, H200_SMS)
    check_config(cfg)
    tiles = -(-out_cols // cfg.block_n)
    splits, per = split_plan(k, cfg.block_k, cfg.split_k)
    assert splits == cfg.split_k, "the rule asks for no empty split"
    # >= 95% of the SMs get a program (K = 8 steps splits 4 ways, not 5: 128 programs), unless K is split finely
    assert tiles * splits >= 0.95 * H200_SMS or per <= MIN_SPLIT_K, (tiles, splits)
    assert splits == 1 or per >= MIN_SPLIT_K
    halves = weight_rows // out_cols
    stage = (SKINNY_MAX_ROWS + halves * cfg.block_n) * cfg.block_k * 2
    # Triton's pipeline keeps num_stages - 1 steps in shared memory (sm_90: 228 KB an SM)
    assert (cfg.num_stages - 1) * stage <= 114 << 10, "two programs fit one SM's shared memory"


def test_split_rule_splits_only_where_tiles_leave_sms_idle() -> None:
    """bench_skinny_gemm --sweep on an H100 (bench/kernels/NOTES.md): 128 tiles unsplit beat two splits, 64 tiles
    split 4 ways beat 3."""
    assert skinny_config(4096, 4096, 2048, H200_SMS).split_k == 1  # 128 tiles: 97% of the SMs
    assert skinny_config(2048, 2048, 2048, H200_SMS).split_k == 4  # 64 tiles: 8 K steps, two programs an SM
    assert skinny_config(2048, 2048, 6144, H200_SMS).split_k == 5
    assert skinny_config(1024, 1024, 768, H200_SMS).split_k == 3  # K allows no more (each split >= MIN_SPLIT_K)
