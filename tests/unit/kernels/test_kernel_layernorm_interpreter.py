"""The fused add + LayerNorm Triton kernel against its PyTorch reference on CPU, in Triton's interpreter.

The kernel test runs this file as a script in a fresh process, because TRITON_INTERPRET must be set before triton
is imported. h must match bit for bit: the reference's for fp32 and fp16; for bf16, the float32 sum truncated, as
the interpreter rounds float32 -> bfloat16 by truncation (the GPU rounds to nearest even, which the GPU test checks).
The normalised rows must lie within one unit in the last place of LayerNorm computed in float64 from that h: the
kernel's float32 statistics are summed in another order than PyTorch's, so they may differ from it by rounding.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from runtime.kernels.layernorm import add_layernorm, add_layernorm_reference

from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).resolve()
EPS = 1e-6  # the vision tower's layer_norm_eps


def truncate_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bfloat16 by dropping the low 16 bits, as the interpreter converts."""
    return (x.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)


def case(rows: int, width: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    """y; a residual that is a row-strided view (as a wider buffer's columns would be) around 64, where the rounding
    of h and the centring both show; a first row whose h is constant, normalised only thanks to eps; weight and bias
    away from 1 and 0."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randn(rows, width, generator=gen).to(dtype)
    residual = (64 + 4 * torch.randn(rows, width + 8, generator=gen)).to(dtype)[:, 8:]
    y[0], residual[0] = 0, 64
    weight = (1 + 0.5 * torch.randn(width, generator=gen)).to(dtype)
    bias = (0.5 * torch.randn(width, generator=gen)).to(dtype)
    return y, residual, weight, bias


def layer_norm_f64(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    h, weight, bias = h.double(), weight.double(), bias.double()
    centred = h - h.mean(-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + EPS) * weight + bias


def check(dtype: torch.dtype) -> None:
    from runtime.kernels.layernorm_triton import add_layernorm_triton

    # one and several rows per program with a partial last one, widths that are not powers of two, the real width
    for rows, width, block_rows in ((5, 48, None), (7, 40, 4), (3, 1152, None), (3, 1152, 2)):
        y, residual, weight, bias = case(rows, width, dtype, seed=rows * width)
        if dtype == torch.bfloat16:
            want_h = truncate_to_bf16(residual.float() + y.float())
        else:
            want_h = add_layernorm_reference(y, residual, weight, bias, EPS).residual
        exact = layer_norm_f64(want_h, weight, bias)
        for res_in in (residual, residual.contiguous()):
            got = add_layernorm_triton(y, res_in, weight, bias, EPS, block_rows=block_rows)
            assert got.residual.is_contiguous() and got.normed.is_contiguous()
            assert got.normed.dtype == dtype
            assert torch.equal(got.residual, want_h), (dtype, rows, width)
            # one ulp of the output dtype, relative; the absolute floor covers outputs near zero, where the bias
            # cancels w·(h - mean)·rstd and the float32 rounding of those terms is larger than an ulp of the result
            torch.testing.assert_close(got.normed.double(), exact, rtol=torch.finfo(dtype).eps, atol=1e-5)
    y, residual, weight, bias = case(4, 48, dtype, seed=0)
    empty = add_layernorm_triton(y[:0], residual[:0], weight, bias, EPS)
    assert empty.residual.shape == empty.normed.shape == (0, 48)


def test_add_layernorm_kernel_matches_reference_in_the_interpreter() -> None:
    assert_script_passes(HERE, interpret=True, timeout=120)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_takes_the_reference(dtype: torch.dtype) -> None:
    y, residual, weight, bias = case(6, 40, dtype, seed=1)
    got = add_layernorm(y, residual, weight, bias, EPS)
    want_h = residual + y
    assert torch.equal(got.residual, want_h)
    assert torch.equal(got.normed, torch.nn.functional.layer_norm(want_h, (40,), weight, bias, EPS))


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"
    from tests.unit.kernels.interpreter_check import patch_numpy_scalars

    patch_numpy_scalars()
    torch.set_num_threads(1)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        check(dtype)
    print("add + LayerNorm interpreter checks passed")
