"""Runs the AuT's Triton kernels (stem convs, fused add + LayerNorm) on CPU in Triton's interpreter (fp32 and fp16,
tiny shapes) against their PyTorch references. Started by test_audio_triton_interpreter.py in a fresh process
(TRITON_INTERPRET must be set before triton is imported)."""
from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from services.audio.model.layers import add_layernorm  # noqa: E402
from services.audio.model.norm_triton import add_layernorm_triton  # noqa: E402
from services.audio.model.stem import bias_gelu_, conv1_gelu_reference  # noqa: E402
from services.audio.model.stem_triton import bias_gelu_triton, conv1_gelu_triton  # noqa: E402
from tests.unit.kernels.interpreter_check import patch_numpy_scalars  # noqa: E402


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6)).item()


def check_conv1(dtype: torch.dtype, tol: float) -> None:
    gen = torch.Generator().manual_seed(0)
    for t, f, masked in ((11, 8, True), (10, 7, False)):  # odd and even sizes: ceil(n / 2) outputs
        padded = F.pad(torch.randn(3, t, f, generator=gen), (1, 1, 1, 1)).to(dtype)
        weight = F.pad(torch.randn(150, 9, generator=gen), (0, 7)).to(dtype)  # 150 channels: a partial block
        bias = torch.randn(150, generator=gen).to(dtype)
        mask = (torch.arange(-(-t // 2))[None, :] < torch.tensor([[6], [2], [4]])).to(dtype) if masked else None
        got = conv1_gelu_triton(padded, weight, bias, mask)
        ref = conv1_gelu_reference(padded.float(), weight.float(), bias.float(),
                                   None if mask is None else mask.float())
        assert got.shape == ref.shape and got.dtype == dtype, (got.shape, ref.shape)
        assert rel_err(got, ref) < tol, (dtype, t, f, rel_err(got, ref))
        if masked:
            assert (got.view(3, -(-t // 2), -(-f // 2), 150)[1, 2:] == 0).all()


def check_bias_gelu(dtype: torch.dtype, tol: float) -> None:
    gen = torch.Generator().manual_seed(1)
    for masked in (True, False):
        x = torch.randn(2, 24, 5, 3, generator=gen).to(dtype).contiguous(memory_format=torch.channels_last)
        bias = torch.randn(24, generator=gen).to(dtype)
        mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]).to(dtype) if masked else None
        ref = bias_gelu_(x.float().clone(), bias.float(), None if mask is None else mask.float())
        got = bias_gelu_triton(x, bias, mask)
        assert got.data_ptr() == x.data_ptr(), "in place"
        assert rel_err(got, ref) < tol, (dtype, masked, rel_err(got, ref))


def check_add_layernorm(dtype: torch.dtype, tol: float) -> None:
    gen = torch.Generator().manual_seed(2)
    norm = torch.nn.LayerNorm(40, eps=1e-5)
    with torch.no_grad():
        norm.weight.normal_(generator=gen)
        norm.bias.normal_(generator=gen)
    for clamp in (None, 3.0):
        x, residual = torch.randn(2, 5, 40, generator=gen).to(dtype)
        h, y = add_layernorm_triton(x, residual, norm.weight.to(dtype), norm.bias.to(dtype), norm.eps, clamp)
        ref_h, ref_y = add_layernorm(x.float(), residual.float(), norm, clamp)  # CPU: the reference path
        assert rel_err(h, ref_h) < tol and rel_err(y, ref_y) < 4 * tol, (dtype, clamp, rel_err(y, ref_y))
        assert clamp is None or h.float().abs().max() <= clamp


if __name__ == "__main__":
    patch_numpy_scalars()
    torch.set_num_threads(1)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 4e-3)):
        check_conv1(dtype, tol)
        check_bias_gelu(dtype, tol)
        check_add_layernorm(dtype, tol)
    print("audio interpreter checks passed")
    sys.exit(0)
