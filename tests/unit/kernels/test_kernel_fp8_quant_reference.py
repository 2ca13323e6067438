"""Per-row FP8 quantization reference: the round trip's error bound, the edge rows, and the CPU dispatch."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels.fp8_quant import (
    FP8_DTYPE, FP8_MAX, QuantizedRows, dequantize_rows, quantize_rows, quantize_rows_reference,
)

# e4m3 keeps 3 mantissa bits: rounding to nearest moves a normal value by at most half an ulp, 2^-4 of its
# magnitude. Below the smallest normal (2^-6, in units of the scale) the spacing is fixed at 2^-9, so the error there
# is at most 2^-10 scales. The float32 scale and its rounded inverse add a few float32 ulps on top.
HALF_ULP_REL = 2.0**-4
HALF_SUBNORMAL_STEP = 2.0**-10
FLOAT32_SLACK = 4 * torch.finfo(torch.float32).eps


def e4m3_ordinal(values: torch.Tensor) -> torch.Tensor:
    """Each e4m3 value's position on the number line (int16): neighbours differ by 1, and +0 and -0 are both 0."""
    bits = values.view(torch.uint8).to(torch.int16)
    magnitude = bits & 0x7F
    return torch.where(bits >= 0x80, -magnitude, magnitude)


def max_ulp_distance(a: QuantizedRows, b: QuantizedRows) -> int:
    return int((e4m3_ordinal(a.values) - e4m3_ordinal(b.values)).abs().max())


def spread_rows(rows: int, width: int, seed: int) -> torch.Tensor:
    """Rows whose magnitudes span ~10 binades (so small ones fall among e4m3's subnormals), one large outlier per
    row, a row of zeros and a row holding a single nonzero."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=gen) * torch.exp2(torch.randint(-8, 3, (rows, width), generator=gen))
    x[:, 3] = 50 * torch.randn(rows, generator=gen)
    x[0] = 0
    x[1] = 0
    x[1, 5] = -3.0
    return x


def test_round_trip_error_is_within_half_an_e4m3_ulp() -> None:
    x = spread_rows(16, 96, seed=0)
    rows = quantize_rows_reference(x)
    assert rows.values.dtype == FP8_DTYPE and rows.values.shape == x.shape and rows.values.is_contiguous()
    assert rows.scale.dtype == torch.float32 and rows.scale.shape == (16, 1) and rows.scale.is_contiguous()
    error = (dequantize_rows(rows) - x).abs()
    bound = HALF_ULP_REL * x.abs() + HALF_SUBNORMAL_STEP * rows.scale + FLOAT32_SLACK * x.abs()
    assert bool((error <= bound).all()), float((error - bound).max())
    # the error is not trivially zero: e4m3 really rounds
    assert float(error.max()) > 0


def test_each_row_maps_its_amax_to_448() -> None:
    x = spread_rows(8, 64, seed=1)
    rows = quantize_rows_reference(x)
    peak = dequantize_rows(rows).abs().amax(dim=1)
    amax = x.abs().amax(dim=1)
    live = amax > 0
    assert torch.equal(rows.values.float().abs().amax(dim=1)[live], torch.full((int(live.sum()),), FP8_MAX))
    torch.testing.assert_close(peak[live], amax[live], rtol=FLOAT32_SLACK, atol=0)


def test_zero_row_is_zeros_with_a_finite_scale() -> None:
    rows = quantize_rows_reference(torch.zeros(2, 32))
    assert torch.equal(rows.values.float(), torch.zeros(2, 32))
    assert bool(torch.isfinite(rows.scale).all() and (rows.scale > 0).all())


def test_gelu_tanh_quantizes_gelu_of_the_rows() -> None:
    x = spread_rows(6, 80, seed=2).to(torch.bfloat16)
    fused = quantize_rows_reference(x, gelu_tanh=True)
    separate = quantize_rows_reference(F.gelu(x.float(), approximate="tanh"))
    assert torch.equal(fused.scale, separate.scale) and torch.equal(fused.values, separate.values)


def test_cpu_takes_the_reference() -> None:
    x = spread_rows(5, 48, seed=3).to(torch.bfloat16)
    for gelu in (False, True):
        got, want = quantize_rows(x, gelu), quantize_rows_reference(x, gelu)
        assert torch.equal(got.values.view(torch.uint8), want.values.view(torch.uint8))
        assert torch.equal(got.scale, want.scale)


def test_ordinal_counts_e4m3_steps() -> None:
    values = torch.tensor([-0.0, 0.0, 2.0**-9, -(2.0**-9), 1.0, 1.125, 448.0, -448.0]).to(FP8_DTYPE)
    assert e4m3_ordinal(values).tolist() == [0, 0, 1, -1, 56, 57, 126, -126]
