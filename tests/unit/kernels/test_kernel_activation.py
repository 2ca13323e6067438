"""silu_mul (SwiGLU's activation on a fused gate/up output): the reference equals the unfused model's rounding; the
Triton kernel equals the reference in Triton's interpreter on CPU (fp32, fp16) and on the GPU (bf16).

The interpreter case runs this file as a script in a fresh process: TRITON_INTERPRET must be set before triton
is imported.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from runtime.kernels.activation import silu_mul, silu_mul_reference

from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).resolve()
TOLERANCE = {  # one rounding of the output dtype, relative
    torch.float32: {"rtol": 2e-6, "atol": 1e-6}, torch.float16: {"rtol": 1e-3, "atol": 1e-3},
    torch.bfloat16: {"rtol": 8e-3, "atol": 8e-3},
}


def gate_up(tokens: int, width: int, dtype: torch.dtype, device: str = "cpu") -> torch.Tensor:
    gen = torch.Generator().manual_seed(tokens * 31 + width)
    return (torch.randn(tokens, 2 * width, generator=gen) * 3).to(device, dtype)


def test_reference_rounds_like_the_unfused_swiglu() -> None:
    x = gate_up(5, 24, torch.bfloat16)
    assert torch.equal(silu_mul_reference(x), F.silu(x[:, :24]) * x[:, 24:])
    assert silu_mul(x).shape == (5, 24) and torch.equal(silu_mul(x), silu_mul_reference(x))  # CPU: the reference


def test_kernel_matches_reference_in_the_interpreter() -> None:
    assert_script_passes(HERE, interpret=True, timeout=120)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernel_matches_reference_on_the_gpu(dtype: torch.dtype) -> None:
    for tokens, width in ((1, 768), (7, 3072), (33, 100)):
        x = gate_up(tokens, width, dtype, "cuda")
        torch.testing.assert_close(silu_mul(x), silu_mul_reference(x), **TOLERANCE[dtype])


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"
    from runtime.kernels.activation_triton import silu_mul_triton
    from tests.unit.kernels.interpreter_check import patch_numpy_scalars

    patch_numpy_scalars()
    torch.set_num_threads(1)
    for dtype in (torch.float32, torch.float16):
        for tokens, width in ((1, 8), (3, 20), (4, 1500)):  # 1500: two programs per token, a partial one
            x = gate_up(tokens, width, dtype)
            torch.testing.assert_close(silu_mul_triton(x), silu_mul_reference(x), **TOLERANCE[dtype])
    print("silu_mul interpreter checks passed")
