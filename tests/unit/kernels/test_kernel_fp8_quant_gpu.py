"""GPU: the per-row FP8 quantization kernel against the PyTorch reference on the vision tower's shapes.

Without GELU both compute the same IEEE float32 operations and round to nearest even into e4m3, so they must agree
bit for bit. With the fused GELU computing tanh through exp (form "exp"): scales within float32 rounding, values
within one e4m3 step. The forms through PTX tanh.approx (float32, or packed bf16 pairs; the default) are held to
accuracy instead: against the exact GELU they must lose next to nothing beside what e4m3 itself does.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runtime.kernels.fp8_quant import dequantize_rows, quantize_rows, quantize_rows_reference
from tests.unit.kernels.kernel_data import needs_cuda
from tests.unit.kernels.test_kernel_fp8_quant_reference import max_ulp_distance, spread_rows

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]


def rows_on_gpu(rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    return spread_rows(rows, width, seed=rows + width).to("cuda", dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("rows", "width"), [(2, 1152), (77, 40), (4096, 1152), (4096, 4304), (333, 3456)])
def test_quantize_equals_reference_bit_for_bit(rows: int, width: int, dtype: torch.dtype) -> None:
    pytest.importorskip("triton")
    x = rows_on_gpu(rows, width, dtype)
    got, want = quantize_rows(x), quantize_rows_reference(x)
    assert torch.equal(got.scale, want.scale)
    assert torch.equal(got.values.view(torch.uint8), want.values.view(torch.uint8))


@pytest.mark.parametrize(("rows", "width"), [(2, 4304), (4096, 4304), (77, 40)])
def test_quantize_with_gelu_within_one_e4m3_step(rows: int, width: int) -> None:
    pytest.importorskip("triton")
    from runtime.kernels.fp8_quant_triton import quantize_rows_triton

    x = rows_on_gpu(rows, width, torch.bfloat16)
    got = quantize_rows_triton(x, True, gelu_form="exp")
    want = quantize_rows_reference(x, gelu_tanh=True)
    # Triton's tanh and torch's differ in the last fp32 bits (H200: 1.2e-5 relative on one row's largest GELU
    # output), and the scale follows that value
    torch.testing.assert_close(got.scale, want.scale, rtol=1e-4, atol=0)
    assert max_ulp_distance(got, want) <= 1


def test_row_strided_input_and_the_video_size() -> None:
    """A column slice of a wider buffer (rows not contiguous) and the 60 s video's 47,040 patch rows."""
    pytest.importorskip("triton")
    wide = rows_on_gpu(47040, 1152 + 64, torch.bfloat16)
    x = wide[:, 64:]
    got, want = quantize_rows(x), quantize_rows_reference(x)
    assert torch.equal(got.scale, want.scale)
    assert torch.equal(got.values.view(torch.uint8), want.values.view(torch.uint8))


@pytest.mark.parametrize(("form", "scale_rtol"), [("approx", 2e-3), ("approx_bf16x2", 1.6e-2)])
def test_approximate_gelu_forms_add_almost_nothing_to_e4m3s_error(form: str, scale_rtol: float) -> None:
    """Against the exact GELU in float32, on rows whose largest GELU output is positive (any row of real fc1
    outputs): the whole tensor's error grows by at most 2% of the reference's own (e4m3 rounding), no element strays
    by more than e4m3's half step at the top of its row (16 of 448) plus 1%, and each row's scale follows its
    largest output within the form's precision (tanh.approx.f32's 2^-11; bf16's 8-bit mantissa, a few roundings
    deep). spread_rows' first two rows (zeros; a single -3.0, all in GELU's negative tail) are checked separately."""
    pytest.importorskip("triton")
    from runtime.kernels.fp8_quant_triton import quantize_rows_triton

    x = rows_on_gpu(4096, 4304, torch.bfloat16)
    exact = F.gelu(x.float(), approximate="tanh")
    want = quantize_rows_reference(x, gelu_tanh=True)
    got = quantize_rows_triton(x, True, gelu_form=form)
    torch.testing.assert_close(got.scale[2:], want.scale[2:], rtol=scale_rtol, atol=0)
    err_got, err_want = dequantize_rows(got) - exact, dequantize_rows(want) - exact
    assert float(err_got[2:].norm()) <= 1.02 * float(err_want[2:].norm())
    row_top = exact[2:].abs().amax(dim=1, keepdim=True)
    assert bool((err_got[2:].abs() <= (16 / 448 + 0.01) * row_top).all()), float((err_got[2:].abs() / row_top).max())


@pytest.mark.parametrize("form", ["approx", "approx_bf16x2"])
def test_approximate_gelu_error_is_bounded_in_the_negative_tail(form: str) -> None:
    """Where GELU(x) = x/2·(1 + tanh(u)) is tiny (x < -2), 1 + tanh(u) cancels: tanh rounded to bf16 (steps of 2^-8
    under 1) leaves GELU wrong by up to ~|x|/2·2^-8 there, which is a large part of a value like GELU(-3) = -0.004.
    Every element, rows of tail values alone included, stays within that plus half an e4m3 step of its row's top."""
    pytest.importorskip("triton")
    from runtime.kernels.fp8_quant_triton import quantize_rows_triton

    x = rows_on_gpu(512, 4304, torch.bfloat16)
    x[2:6] = -torch.linspace(2.0, 9.0, 4304, device="cuda").to(torch.bfloat16)  # whole rows in the tail
    exact = F.gelu(x.float(), approximate="tanh")
    got = quantize_rows_triton(x, True, gelu_form=form)
    err = (dequantize_rows(got) - exact).abs()
    bound = 2**-8 * x.float().abs() + 16 * got.scale  # half a step at the top of the row: 16 of 448, times its scale
    assert bool((err <= bound).all()), float((err - bound).max())
    assert bool((got.values[2:6].float() <= 0).all())  # GELU of a negative x is never positive
