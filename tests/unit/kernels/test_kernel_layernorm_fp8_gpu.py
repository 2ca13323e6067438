"""GPU: the add + LayerNorm pass writing e4m3 rows against the add + LayerNorm kernel followed by the quantization
kernel (bit for bit: the same operations on the same rounded rows) and against the PyTorch reference (h bit for bit;
scales within the normalised rows' ulp of bf16/fp16; values within one e4m3 step away from zero), on the vision
tower's width."""
from __future__ import annotations

import pytest
import torch

from runtime.kernels.fp8_quant import dequantize_rows, quantize_rows
from runtime.kernels.layernorm import add_layernorm, add_layernorm_fp8, add_layernorm_fp8_reference

pytestmark = pytest.mark.gpu
pytest.importorskip("runtime.kernels.layernorm_triton")  # imports triton

WIDTH = 1152  # the released tower's hidden size
EPS = 1e-6


def case(rows: int, dtype: torch.dtype, residual_stride: int = WIDTH) -> tuple[torch.Tensor, ...]:
    """A sublayer output, a residual stream around 40 (possibly the left columns of a wider buffer), one row whose
    h is constant (normalised to the bias alone), weights and biases away from 1 and 0."""
    gen = torch.Generator().manual_seed(rows)
    y = torch.randn(rows, WIDTH, generator=gen)
    residual = (40 + 8 * torch.randn(rows, residual_stride, generator=gen))[:, :WIDTH]
    y[0], residual[0] = 0, 40
    weight = 1 + 0.3 * torch.randn(WIDTH, generator=gen)
    bias = 0.2 * torch.randn(WIDTH, generator=gen)
    return tuple(t.to("cuda", dtype) for t in (y, residual, weight, bias))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("rows", "residual_stride"), [(1, WIDTH), (77, WIDTH), (4099, 2 * WIDTH), (47_040, WIDTH)],
                         ids=["one", "few", "strided", "video"])  # 47,040: the 60 s video's patches
def test_fused_fp8_equals_norm_then_quantize(dtype: torch.dtype, rows: int, residual_stride: int) -> None:
    y, residual, weight, bias = case(rows, dtype, residual_stride)
    got = add_layernorm_fp8(y, residual, weight, bias, EPS)
    h, normed = add_layernorm(y, residual, weight, bias, EPS)
    two_passes = quantize_rows(normed)
    assert got.residual.dtype == dtype and got.residual.is_contiguous()
    assert got.normed.values.dtype == torch.float8_e4m3fn and got.normed.scale.shape == (rows, 1)
    assert torch.equal(got.residual, h)
    assert torch.equal(got.normed.scale, two_passes.scale)
    assert torch.equal(got.normed.values.view(torch.uint8), two_passes.values.view(torch.uint8))

    want = add_layernorm_fp8_reference(y, residual, weight, bias, EPS)
    assert torch.equal(got.residual, want.residual)
    # a row's scale is its largest normalised value / 448, which the kernel holds to an ulp of the dtype
    torch.testing.assert_close(got.normed.scale, want.normed.scale, rtol=torch.finfo(dtype).eps, atol=1e-5 / 448)
    # values within one e4m3 step (2^-3 relative); near zero the statistics' summation order can flip a tiny value's
    # sign (ordinals then differ by tens on the H200), so the absolute bound there is e4m3's smallest normal step.
    # Row 0 (constant h: variance 0, so 1/sqrt(eps) multiplies whatever residue the reference's mean leaves) is held
    # to the two-pass kernels above only.
    torch.testing.assert_close(dequantize_rows(got.normed)[1:], dequantize_rows(want.normed)[1:], rtol=2**-3,
                               atol=float(want.normed.scale.max()) * 2**-6)


def test_fp32_takes_the_reference() -> None:
    y, residual, weight, bias = case(33, torch.float32)
    got = add_layernorm_fp8(y, residual, weight, bias, EPS)
    want = add_layernorm_fp8_reference(y, residual, weight, bias, EPS)
    assert torch.equal(got.residual, want.residual) and torch.equal(got.normed.scale, want.normed.scale)
    assert torch.equal(got.normed.values.view(torch.uint8), want.normed.values.view(torch.uint8))
