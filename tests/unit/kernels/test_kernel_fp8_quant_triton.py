"""The per-row FP8 quantization Triton kernel on CPU: its arithmetic in Triton's interpreter against the reference,
and its compilation for sm_90 (H100/H200) through Triton's compiler and the bundled ptxas.

Each check runs this file as a script in a fresh process, because TRITON_INTERPRET must be set (or unset) before
triton is imported. Scales must match the reference bit for bit (both divide with IEEE rounding). The interpreter
converts float32 -> e4m3 its own way (ties round up, and a rounding that carries into the exponent comes out wrong),
so the values must equal the reference's float32 rows passed through that same conversion, bit for bit; the GPU
rounds to nearest even like PyTorch, which the GPU test checks. With the fused GELU the kernel computes tanh through
exp, so there its scales may differ from PyTorch's tanh by float32 rounding and its values by one e4m3 step.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from tests.triton_scripts import assert_script_passes
from tests.unit.kernels.kernel_data import self_check_main

HERE = Path(__file__).resolve()
BF16 = torch.bfloat16


def test_quantize_kernel_matches_reference_in_the_interpreter() -> None:
    assert_script_passes(HERE, "interpret", interpret=True)


def test_quantize_kernel_compiles_for_sm90_without_spills() -> None:
    assert_script_passes(HERE, "compile", interpret=False)


def interpreter_e4m3(scaled: torch.Tensor) -> torch.Tensor:
    """float32 -> float8_e4m3fn exactly as Triton's interpreter converts a kernel's `.to(float8e4nv)`."""
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime.interpreter import _convert_float

    bits = _convert_float(scaled.numpy(), tl.float32, tl.float8e4nv, ir.ROUNDING_MODE.RTNE)
    return torch.from_numpy(bits.astype("uint8")).view(torch.float8_e4m3fn)


def check_interpreted(dtype: torch.dtype) -> None:
    from runtime.kernels.fp8_quant import QuantizedRows, scale_rows_reference
    from runtime.kernels.fp8_quant_triton import quantize_rows_triton
    from tests.unit.kernels.test_kernel_fp8_quant_reference import max_ulp_distance, spread_rows

    # several rows per program with a partial last one (384 wide: 4 rows a program), one row per program, the
    # tower's widths (1152 in, 4304 into fc2 with its GELU: a 4096 tile plus a 256 tail); the spread rows hold a
    # zero row, a one-element row, outliers and subnormal-range values
    for rows, width, block_rows in ((7, 40, None), (5, 48, 4), (6, 384, None), (3, 1152, None), (2, 4304, None)):
        x = spread_rows(rows, width + 8, seed=rows * width).to(dtype)[:, 8:]  # row-strided, as a wider buffer's
        for gelu in (False, True):
            scaled, scale = scale_rows_reference(x, gelu)
            want = QuantizedRows(interpreter_e4m3(scaled), scale)
            for x_in in (x, x.contiguous()):
                got = quantize_rows_triton(x_in, gelu, block_rows=block_rows, gelu_form="exp")
                assert got.values.is_contiguous() and got.scale.shape == (rows, 1)
                case = (dtype, rows, width, gelu)
                if gelu:
                    torch.testing.assert_close(got.scale, want.scale, rtol=4e-7, atol=0)
                    assert max_ulp_distance(got, want) <= 1, case
                else:
                    assert torch.equal(got.scale, want.scale), case
                    assert torch.equal(got.values.view(torch.uint8), want.values.view(torch.uint8)), case
    empty = quantize_rows_triton(torch.zeros(0, 48, dtype=dtype))
    assert empty.values.shape == (0, 48) and empty.scale.shape == (0, 1)


def compile_for_sm90() -> None:
    from tests.unit.kernels.compile_check import assert_no_spills, install

    install()
    from runtime.kernels.fp8_quant_triton import quantize_rows_triton

    from runtime.kernels.fp8_quant_triton import GELU_FORMS

    for width in (1152, 4304):  # the tower's hidden and MLP widths
        quantize_rows_triton(torch.zeros(2, width, dtype=BF16))
    for form in GELU_FORMS:  # the PTX forms compile here only: the interpreter cannot run them
        quantize_rows_triton(torch.zeros(2, 4304, dtype=BF16), True, gelu_form=form)
    assert_no_spills()


if __name__ == "__main__":
    self_check_main(sys.argv[1], check_interpreted, compile_for_sm90, "fp8 quantization kernel")
