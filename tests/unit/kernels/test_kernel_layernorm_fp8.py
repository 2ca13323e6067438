"""The add + LayerNorm kernel writing e4m3 rows (for an FP8 linear) on CPU: its arithmetic in Triton's interpreter,
its compilation for sm_90 (H100/H200), and the CPU dispatch to the reference.

The interpreted checks run this file as a script in a fresh process, because TRITON_INTERPRET must be set (or unset)
before triton is imported. The fused pass must equal the interpreted add + LayerNorm kernel followed by the
interpreted quantization kernel bit for bit (h, e4m3 values and scales): the same operations on the same rounded
rows. Against the PyTorch reference (`quantize_rows_reference` of `add_layernorm_reference`) h is exact for fp32
and fp16, the scales as close as test_kernel_layernorm_interpreter.py holds the normalised rows (the kernel's
float32 statistics are summed in another order than PyTorch's) and the values within one e4m3 step; the reference's
float32 rows go through the interpreter's own e4m3 conversion (it rounds ties up), as test_kernel_fp8_quant_triton.py
explains. bf16 is checked against the two kernels only: the interpreter truncates float32 -> bfloat16 (the GPU test
checks bf16 against the reference).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from tests.triton_scripts import assert_script_passes
from tests.unit.kernels.kernel_data import self_check_main

from runtime.kernels.fp8_quant import quantize_rows_reference
from runtime.kernels.layernorm import add_layernorm_fp8, add_layernorm_fp8_reference, add_layernorm_reference

HERE = Path(__file__).resolve()
BF16 = torch.bfloat16
EPS = 1e-6  # the vision tower's layer_norm_eps


def test_fused_fp8_kernel_matches_the_two_kernels_in_the_interpreter() -> None:
    assert_script_passes(HERE, "interpret", interpret=True)


def test_fused_fp8_kernel_compiles_for_sm90_without_spills() -> None:
    assert_script_passes(HERE, "compile", interpret=False)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_cpu_takes_the_reference(dtype: torch.dtype) -> None:
    from tests.unit.kernels.test_kernel_layernorm_interpreter import case

    y, residual, weight, bias = case(6, 40, dtype, seed=1)
    got = add_layernorm_fp8(y, residual, weight, bias, EPS)
    h, normed = add_layernorm_reference(y, residual, weight, bias, EPS)
    want = quantize_rows_reference(normed)
    assert torch.equal(got.residual, h) and got.residual.dtype == dtype  # the residual stream is not quantized
    assert torch.equal(got.normed.values.view(torch.uint8), want.values.view(torch.uint8))
    assert torch.equal(got.normed.scale, want.scale)
    assert got.normed.values.dtype == torch.float8_e4m3fn and got.normed.scale.shape == (6, 1)


def test_reference_quantizes_the_rows_it_would_store() -> None:
    """The reference rounds the normalised rows to h's dtype before quantizing, as the unfused norm stores them."""
    from tests.unit.kernels.test_kernel_layernorm_interpreter import case

    y, residual, weight, bias = case(5, 48, BF16, seed=2)
    got = add_layernorm_fp8_reference(y, residual, weight, bias, EPS)
    normed = add_layernorm_reference(y, residual, weight, bias, EPS).normed
    assert normed.dtype == BF16
    assert torch.equal(got.normed.scale, quantize_rows_reference(normed).scale)


def check_interpreted(dtype: torch.dtype) -> None:
    from runtime.kernels.fp8_quant import FP8_MAX, QuantizedRows, scale_rows_reference
    from runtime.kernels.fp8_quant_triton import quantize_rows_triton
    from runtime.kernels.layernorm_triton import add_layernorm_fp8_triton, add_layernorm_triton
    from tests.unit.kernels.test_kernel_fp8_quant_reference import max_ulp_distance
    from tests.unit.kernels.test_kernel_fp8_quant_triton import interpreter_e4m3
    from tests.unit.kernels.test_kernel_layernorm_interpreter import case

    # one and several rows per program with a partial last one, widths that are not powers of two, the real width;
    # case()'s first row has a constant h, so its normalised row is the bias alone
    for rows, width, block_rows in ((5, 48, None), (7, 40, 4), (3, 1152, None), (3, 1152, 2)):
        y, residual, weight, bias = case(rows, width, dtype, seed=rows * width)
        for res_in in (residual, residual.contiguous()):
            got = add_layernorm_fp8_triton(y, res_in, weight, bias, EPS, block_rows=block_rows)
            assert got.residual.dtype == dtype and got.residual.is_contiguous()
            assert got.normed.values.dtype == torch.float8_e4m3fn and got.normed.values.is_contiguous()
            assert got.normed.scale.dtype == torch.float32 and got.normed.scale.shape == (rows, 1)
            h, normed = add_layernorm_triton(y, res_in, weight, bias, EPS, block_rows=block_rows)
            two_kernels = quantize_rows_triton(normed)
            case_id = (dtype, rows, width, block_rows)
            assert torch.equal(got.residual, h), case_id
            assert torch.equal(got.normed.scale, two_kernels.scale), case_id
            assert torch.equal(got.normed.values.view(torch.uint8), two_kernels.values.view(torch.uint8)), case_id
            if dtype == BF16:
                continue
            want_h, want_normed = add_layernorm_reference(y, res_in, weight, bias, EPS)
            scaled, scale = scale_rows_reference(want_normed)
            assert torch.equal(got.residual, want_h), case_id
            # a scale is its row's largest normalised value / 448: that value's tolerance in the add + LayerNorm
            # interpreter test (an ulp of the dtype, 1e-5 absolute), carried over
            torch.testing.assert_close(got.normed.scale, scale, rtol=torch.finfo(dtype).eps, atol=1e-5 / FP8_MAX)
            assert max_ulp_distance(got.normed, QuantizedRows(interpreter_e4m3(scaled), scale)) <= 1, case_id
    y, residual, weight, bias = case(4, 48, dtype, seed=0)
    empty = add_layernorm_fp8_triton(y[:0], residual[:0], weight, bias, EPS)
    assert empty.residual.shape == empty.normed.values.shape == (0, 48) and empty.normed.scale.shape == (0, 1)


def compile_for_sm90() -> None:
    from tests.unit.kernels.compile_check import COMPILED, assert_no_spills, install

    install()
    from runtime.kernels.layernorm_triton import add_layernorm_fp8_triton, add_layernorm_triton

    for width in (1152, 32):  # the released width (one row per program), the tiny tower's (64 rows per program)
        x, w = torch.zeros(2, width, dtype=BF16), torch.zeros(width, dtype=BF16)
        add_layernorm_triton(x, x, w, w, EPS)
        add_layernorm_fp8_triton(x, x, w, w, EPS)
    assert_no_spills()
    assert len(COMPILED) == 4, "the fp8 and the plain variant compile to their own kernels"


if __name__ == "__main__":
    self_check_main(sys.argv[1], check_interpreted, compile_for_sm90, "add + LayerNorm fp8 kernel")
