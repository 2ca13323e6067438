"""The vision rotary Triton kernel against its PyTorch reference on CPU, in Triton's interpreter.

The test runs this file as a script in a fresh process, because TRITON_INTERPRET must be set before triton is
imported. fp32 and fp16 must match bit for bit. The interpreter rounds float32 -> bfloat16 by truncation (the GPU
rounds to nearest even), so bf16 is checked bit for bit against the reference's float32 math truncated the same
way; the GPU test checks the real rounding.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).resolve()


def truncate_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bfloat16 by dropping the low 16 bits, as the interpreter converts."""
    return (x.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)


def case(tokens: int, heads: int, head_dim: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    """q, k as strided views of one [N, 3, H, D] qkv buffer, and cos/sin [N, D] whose halves differ."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, 3, heads, head_dim, generator=gen).to(dtype)
    angles = torch.rand(tokens, head_dim, generator=gen) * 40
    return qkv[:, 0], qkv[:, 1], angles.cos(), angles.sin()


def check(dtype: torch.dtype) -> None:
    from runtime.kernels.vision_rotary import vision_rotary_reference
    from runtime.kernels.vision_rotary_triton import vision_rotary_triton

    # several programs with a partial last one, a head count and half width that are not powers of two
    for tokens, heads, head_dim, block_rows in ((7, 3, 12, 4), (5, 2, 8, 32), (9, 4, 72, 8)):
        q, k, cos, sin = case(tokens, heads, head_dim, dtype, seed=tokens)
        if dtype == torch.bfloat16:
            want = vision_rotary_reference(q.float(), k.float(), cos, sin)
            want = type(want)(truncate_to_bf16(want.q), truncate_to_bf16(want.k))
        else:
            want = vision_rotary_reference(q, k, cos, sin)
        for q_in, k_in in ((q, k), (q.contiguous(), k.contiguous())):  # views of qkv, and tensors of their own
            got = vision_rotary_triton(q_in, k_in, cos, sin, block_rows=block_rows)
            assert got.q.is_contiguous() and got.k.is_contiguous()
            assert torch.equal(got.q, want.q) and torch.equal(got.k, want.k), (dtype, tokens, heads, head_dim)


def test_vision_rotary_kernel_matches_reference_in_the_interpreter() -> None:
    assert_script_passes(HERE, interpret=True, timeout=120)


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"
    from tests.unit.kernels.interpreter_check import patch_numpy_scalars

    patch_numpy_scalars()
    torch.set_num_threads(1)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        check(dtype)
    print("vision rotary interpreter checks passed")
