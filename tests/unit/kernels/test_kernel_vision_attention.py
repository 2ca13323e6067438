"""The vision attention Triton kernel on CPU: its arithmetic in Triton's interpreter against per-segment SDPA, its
compilation for sm_90 (H100/H200) through Triton's compiler and the bundled ptxas, and the entry point's checks.

The interpreter and compile checks run this file as a script in a fresh process, because TRITON_INTERPRET must be set
(or unset) before triton is imported. Segments are ragged: one shorter than BLOCK_M, one empty, one a multiple of
BLOCK_N, others ending in a partial key block; q, k, v are strided views of one packed qkv tensor.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch  # importing torch leaves triton unimported, so the script can still set TRITON_INTERPRET first

from runtime.kernels.vision_attention import check_inputs, head_dim_supported
from tests.triton_scripts import assert_script_passes
from tests.unit.kernels.kernel_data import rel_err, self_check_main

HERE = Path(__file__).resolve()
BF16 = torch.bfloat16
SEGMENTS = (7, 0, 40, 32, 53)  # with 32-row, 16-key tiles: < BLOCK_M, empty, ragged, whole key blocks, ragged


def test_kernel_matches_sdpa_in_the_interpreter() -> None:
    assert_script_passes(HERE, "interpret", interpret=True, timeout=120)


def test_kernel_compiles_for_sm90_without_spills() -> None:
    assert_script_passes(HERE, "compile", interpret=False, timeout=240)


def packed_case(segments: tuple[int, ...], heads: int, head_dim: int, dtype: torch.dtype,
                seed: int) -> tuple[torch.Tensor, ...]:
    """q, k, v as views of one [N, 3, H, D] qkv buffer (token stride 3·H·D, head stride D), and int32 cu_seqlens."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(sum(segments), 3, heads, head_dim, generator=gen).to(dtype)
    cu = torch.zeros(len(segments) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(segments).cumsum(0)
    return qkv[:, 0], qkv[:, 1], qkv[:, 2], cu


def check_interpreted(dtype: torch.dtype) -> None:
    from runtime.kernels.vision_attention import vision_attention, vision_attention_reference
    from runtime.kernels.vision_attention_triton import AttentionTile, split_head_dim

    assert split_head_dim(72) == (64, 16) and split_head_dim(80) == (64, 16) and split_head_dim(64) == (64, 0)
    if dtype == BF16:
        return  # the interpreter mishandles bf16 dots; the GPU test covers bf16
    tol = 1e-5 if dtype == torch.float32 else 1e-3
    tile = AttentionTile(block_m=32, block_n=16, num_warps=4, num_stages=1)
    for head_dim in (72, 64):  # a masked 16-lane tail, and no tail
        q, k, v, cu = packed_case(SEGMENTS, heads=2, head_dim=head_dim, dtype=dtype, seed=head_dim)
        want = vision_attention_reference(q, k, v, cu)
        for max_seqlen in (max(SEGMENTS), 64):  # the exact longest segment, and a looser bound
            got = vision_attention(q, k, v, cu, max_seqlen, tile)
            assert got.is_contiguous() and got.shape == q.shape and got.dtype == dtype
            assert rel_err(got, want) < tol, (dtype, head_dim, max_seqlen, rel_err(got, want))
    empty = torch.zeros(0, 2, 72, dtype=dtype)
    assert vision_attention(empty, empty, empty, torch.zeros(1, dtype=torch.int32), 0).shape == (0, 2, 72)


def compile_for_sm90() -> None:
    from tests.unit.kernels.compile_check import COMPILED, install, ptxas_usage

    install()
    from runtime.kernels.vision_attention_triton import DEFAULT_TILE, SWEEP_TILES, vision_attention_triton

    cu = torch.tensor([0, 784, 1568], dtype=torch.int32)
    shapes = [(72, tile, BF16) for tile in SWEEP_TILES]  # the tower's head dim, every tile the bench sweeps
    shapes += [(72, DEFAULT_TILE, torch.float16)]
    shapes += [(head_dim, DEFAULT_TILE, BF16) for head_dim in (64, 80, 128)]  # untailed and exactly-tailed splits
    for head_dim, tile, dtype in shapes:
        q, k, v, _ = packed_case((2,), heads=16, head_dim=head_dim, dtype=dtype, seed=0)
        vision_attention_triton(q.contiguous(), k.contiguous(), v, cu, 784, tile)  # q, k as the rotary writes them
    for name, kernel in COMPILED:
        regs, spills = ptxas_usage(kernel.asm["ptx"], name)
        print(f"{name} regs {regs} spill bytes {spills} smem {kernel.metadata.shared}")
        assert spills == 0, f"{name} spills {spills} bytes"


@pytest.mark.parametrize("head_dim", [8, 12, 20, 136])
def test_unsupported_head_dims(head_dim: int) -> None:
    assert not head_dim_supported(head_dim)
    q = torch.zeros(4, 2, head_dim)
    with pytest.raises(ValueError, match="head_dim"):
        check_inputs(q, q, q, torch.zeros(2, dtype=torch.int32))


def test_supported_head_dims() -> None:
    assert all(head_dim_supported(d) for d in (16, 24, 64, 72, 80, 96, 128))


def test_shapes_dtypes_strides_and_bounds_are_checked() -> None:
    q = torch.zeros(4, 2, 72, dtype=BF16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="shape"):
        check_inputs(q, q[:3], q, cu)
    with pytest.raises(ValueError, match="shape"):
        check_inputs(q[0], q[0], q[0], cu)
    with pytest.raises(ValueError, match="one dtype"):
        check_inputs(q, q.half(), q, cu)
    with pytest.raises(ValueError, match="contiguous"):
        wide = torch.zeros(4, 2, 144, dtype=BF16)[..., ::2]
        check_inputs(wide, wide, wide, cu)
    for bad in (cu.long(), cu[None], torch.zeros(0, dtype=torch.int32)):
        with pytest.raises(ValueError, match="cu_seqlens"):
            check_inputs(q, q, q, bad)


def test_cpu_tensors_need_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    q = torch.zeros(4, 2, 72)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="needs them all on CUDA"):
        check_inputs(q, q, q, cu)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check_inputs(q, q, q, cu)  # float32 is taken in the interpreter
    with pytest.raises(ValueError, match="dtype torch.float64"):
        check_inputs(q.double(), q.double(), q.double(), cu)


def test_devices_must_match(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q = torch.zeros(4, 2, 72, dtype=BF16)
    meta = torch.zeros(2, dtype=torch.int32, device="meta")
    with pytest.raises(ValueError, match="share one device"):
        check_inputs(q, q, q, meta)


if __name__ == "__main__":
    self_check_main(sys.argv[1], check_interpreted, compile_for_sm90, "vision attention kernel")
