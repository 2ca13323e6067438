"""The skinny GEMM Triton kernel on CPU: its arithmetic in Triton's interpreter against the fp32 reference (fp32 and
fp16; bf16 dots are left to the GPU test, the interpreter mishandles them), and its compilation for sm_90 through
Triton's compiler and the bundled ptxas, without spills, at the decode linears' shapes and tilings.

Each check runs this file as a script in a fresh process, because TRITON_INTERPRET must be set (or unset) before
triton is imported.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from tests.triton_scripts import assert_script_passes
from tests.unit.kernels.kernel_data import rel_err

HERE = Path(__file__).resolve()
BF16 = torch.bfloat16


def test_skinny_gemm_matches_reference_in_the_interpreter() -> None:
    assert_script_passes(HERE, "interpret", interpret=True, timeout=120)


def test_skinny_gemm_compiles_for_sm90_without_spills() -> None:
    assert_script_passes(HERE, "compile", interpret=False, timeout=240)


def check_interpreted(dtype: torch.dtype) -> None:
    """M of 1, 3, 8, 16 (strided rows), 40 outputs in 16-wide tiles (the last one partial), K = 72 in 32-wide steps
    (the last partial) or 64 (even); unsplit, split 2 and 3 ways; every epilogue; the default tiling once."""
    from runtime.kernels.skinny_gemm import Epilogue, SkinnyConfig, skinny_linear_reference
    from runtime.kernels.skinny_gemm_triton import _COUNTERS, skinny_gemm_triton

    tol = 1e-5 if dtype == torch.float32 else 3e-3
    gen = torch.Generator().manual_seed(0)
    n = 40
    configs = [SkinnyConfig(16, 32, split, 4, 2) for split in (1, 2, 3)]
    for rows in (1, 3, 8, 16):
        for k in (72, 64):
            wide = torch.randn(rows, k + 24, generator=gen).to(dtype)
            x = wide[:, 8:8 + k]  # a column slice: row stride k + 24
            w = (torch.randn(2 * n, k, generator=gen) / k**0.5).to(dtype)
            res = torch.randn(rows, n + 8, generator=gen).to(dtype)[:, 4:4 + n]
            cases = [(None, w[:n], None), (Epilogue.SILU_MUL, w, None), (Epilogue.RESIDUAL, w[:n], res)]
            for epilogue, weight, residual in cases:
                want = skinny_linear_reference(x, weight, epilogue, residual)
                for cfg in configs:
                    got = skinny_gemm_triton(x, weight, epilogue, residual, cfg)
                    assert got.shape == want.shape and got.dtype == dtype
                    assert rel_err(got, want) < tol, (dtype, rows, k, epilogue, cfg, rel_err(got, want))
                    if cfg.split_k > 1:  # the partials are summed in split order: the same bits every run
                        assert torch.equal(got, skinny_gemm_triton(x, weight, epilogue, residual, cfg))
    assert not any(bool(c.any()) for c in _COUNTERS.values()), "the last program of each tile resets its counter"
    x = torch.randn(2, 300, generator=gen).to(dtype)
    w = (torch.randn(24, 300, generator=gen) / 300**0.5).to(dtype)
    assert rel_err(skinny_gemm_triton(x, w), skinny_linear_reference(x, w)) < tol  # the default tiling


def check_errors() -> None:
    """The wrapper's own error branches: too many split tiles for the counters, the first split-K call inside a
    CUDA-graph capture."""
    from runtime.kernels.skinny_gemm import SkinnyConfig
    from runtime.kernels.skinny_gemm_triton import MAX_SPLIT_TILES, arrival_counters, skinny_gemm_triton

    x, w = torch.zeros(1, 64), torch.zeros(16 * (MAX_SPLIT_TILES + 1), 64)
    with pytest.raises(ValueError, match="split-K over"):
        skinny_gemm_triton(x, w, config=SkinnyConfig(16, 32, 2, 4, 2))
    with pytest.raises(RuntimeError, match="inside CUDA-graph capture"):
        arrival_counters(torch.device("meta"), capturing=True)


def compile_for_sm90() -> None:
    from runtime.kernels.skinny_gemm import Epilogue, SkinnyConfig
    from tests.unit.kernels.compile_check import assert_no_spills, install

    install()
    from runtime.kernels.skinny_gemm_triton import skinny_gemm_triton

    x = torch.zeros(1, 2048, dtype=BF16)
    cases = [  # (weight rows, K, epilogue, config): the default tilings of each kind, the widest swept tiles
        (1024, 2048, None, None),  # split 4 ways
        (5120, 2048, None, None),  # unsplit
        (6144, 1024, Epilogue.SILU_MUL, None),  # split, two weight tiles a step
        (1024, 3072, Epilogue.RESIDUAL, None),
        (2048, 2048, Epilogue.SILU_MUL, SkinnyConfig(64, 256, 1, 4, 3)),
        (4096, 2048, None, SkinnyConfig(128, 256, 2, 8, 3)),
    ]
    for weight_rows, k, epilogue, cfg in cases:
        out_cols = weight_rows // 2 if epilogue is Epilogue.SILU_MUL else weight_rows
        residual = torch.zeros(1, out_cols, dtype=BF16) if epilogue is Epilogue.RESIDUAL else None
        skinny_gemm_triton(x[:, :k] if k <= 2048 else torch.zeros(1, k, dtype=BF16),
                           torch.zeros(weight_rows, k, dtype=BF16), epilogue, residual, cfg)
    assert_no_spills()


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "interpret":
        from tests.unit.kernels.interpreter_check import patch_numpy_scalars

        patch_numpy_scalars()
        for dtype in (torch.float32, torch.float16):
            check_interpreted(dtype)
        check_errors()
    else:
        compile_for_sm90()
    print(f"skinny gemm: {sys.argv[1]} checks passed")
