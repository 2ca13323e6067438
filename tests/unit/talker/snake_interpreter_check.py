"""Runs Code2Wav's Triton SnakeBeta kernel on CPU in Triton's interpreter against the torch reference.

Started by test_code2wav_snake_interpreter.py in a fresh process: TRITON_INTERPRET must be set before triton
is imported.
"""
from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from tests.unit.kernels.interpreter_check import patch_numpy_scalars  # noqa: E402


def check_snake(dtype: torch.dtype) -> None:
    from services.talker.model.code2wav_snake import snake_reference
    from services.talker.model.code2wav_snake_triton import snake_triton

    gen = torch.Generator().manual_seed(0)
    # (B, C, T, left pad, trim): 1100 padded steps span two time blocks, the second partial; 3 * 5 rows: partial
    # row blocks; a trimmed view (a trans-conv's output) is read in place at its row stride
    for b, c, t, pad, trim in ((2, 3, 1046, 54, 0), (3, 5, 6, 4, 3), (1, 96, 1, 6, 0), (2, 7, 37, 0, 2)):
        full = (torch.randn(b, c, t + 2 * trim, generator=gen) * 3).to(dtype)
        x = full[..., trim : trim + t]
        a, inv_b = torch.rand(c, generator=gen) * 4, torch.rand(c, generator=gen) + 0.5
        got, ref = snake_triton(x, a, inv_b, pad), snake_reference(x, a, inv_b, pad)
        assert got.shape == ref.shape == (b, c, pad + t) and got.dtype == dtype and got.is_contiguous()
        assert torch.equal(got[..., :pad], torch.zeros_like(got[..., :pad]))
        tol = 1e-5 if dtype == torch.float32 else 2e-3
        torch.testing.assert_close(got.float(), ref.float(), rtol=tol, atol=tol)


if __name__ == "__main__":
    patch_numpy_scalars()
    torch.set_num_threads(1)
    for dtype in (torch.float32, torch.float16):
        check_snake(dtype)
    print("snake interpreter checks passed")
    sys.exit(0)
