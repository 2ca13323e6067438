"""GPU: the skinny GEMM in bf16 at the decode linears' shapes against the fp32 reference and cuBLAS (F.linear), its
determinism, and CUDA-graph capture and replay of split-K launches.

Both accumulate in fp32 and round once into bf16 (2^-9 relative), in different orders, so elementwise they agree to
about a bf16 step; over a whole output ours must be as close to the fp32 result as F.linear is. The fused SwiGLU
rounds once where F.linear + silu_mul rounds three times, so it must be at least as close.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runtime.kernels.activation import silu_mul
from runtime.kernels.skinny_gemm import Epilogue, SkinnyConfig, skinny_linear, skinny_linear_reference
from tests.unit.kernels.kernel_data import needs_cuda, rel_err
from tests.unit.kernels.test_kernel_skinny_gemm_reference import SHAPES

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]
BF16 = torch.bfloat16


def operands(rows: int, weight_rows: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x as a column slice of a wider buffer (row stride k + 64), W scaled so outputs are O(1)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k + 64, generator=gen).to("cuda", BF16)[:, 32:32 + k]
    w = (torch.randn(weight_rows, k, generator=gen) / k**0.5).to("cuda", BF16)
    return x, w


def fp32_reference(x: torch.Tensor, w: torch.Tensor, epilogue: Epilogue | None = None,
                   residual: torch.Tensor | None = None) -> torch.Tensor:
    return skinny_linear_reference(x.float(), w.float(), epilogue, None if residual is None else residual.float())


def check_close(got: torch.Tensor, want: torch.Tensor, baseline: torch.Tensor) -> None:
    assert got.dtype == BF16 and got.shape == want.shape
    torch.testing.assert_close(got.float(), want, rtol=8e-3, atol=8e-3)
    assert rel_err(got, want) <= 1.25 * rel_err(baseline, want) + 1e-4, (rel_err(got, want), rel_err(baseline, want))


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 16])
@pytest.mark.parametrize(("weight_rows", "k", "epilogue"), SHAPES)
def test_matches_fp32_reference_like_f_linear(rows: int, weight_rows: int, k: int, epilogue: Epilogue | None) -> None:
    x, w = operands(rows, weight_rows, k, seed=rows + weight_rows + k)
    want = fp32_reference(x, w, epilogue)
    baseline = silu_mul(F.linear(x, w)) if epilogue is Epilogue.SILU_MUL else F.linear(x, w)
    check_close(skinny_linear(x, w, epilogue), want, baseline)
    if epilogue is Epilogue.SILU_MUL:  # the same weight without the epilogue: the plain kernel at 2I outputs
        check_close(skinny_linear(x, w), fp32_reference(x, w), F.linear(x, w))


@pytest.mark.parametrize("rows", [1, 5, 16])
def test_residual_epilogue(rows: int) -> None:
    x, w = operands(rows, 1024, 3072, seed=rows)
    residual = torch.randn(rows, 1024 + 8, device="cuda").to(BF16)[:, 8:]
    want = fp32_reference(x, w, Epilogue.RESIDUAL, residual)
    check_close(skinny_linear(x, w, Epilogue.RESIDUAL, residual), want, residual + F.linear(x, w))


@pytest.mark.parametrize("config", [SkinnyConfig(16, 128, 8, 4, 4), SkinnyConfig(64, 256, 1, 4, 3),
                                    SkinnyConfig(128, 128, 2, 8, 3), SkinnyConfig(32, 64, 16, 2, 4),
                                    SkinnyConfig(32, 256, 3, 4, 2)])
def test_swept_tilings(config: SkinnyConfig) -> None:
    """Tilings the benchmark sweeps, on a split-K shape and the fused SwiGLU (uneven K splits included)."""
    for weight_rows, k, epilogue in ((1024, 2048, None), (6144, 1024, Epilogue.SILU_MUL), (1544, 768, None)):
        x, w = operands(7, weight_rows, k, seed=k)
        baseline = silu_mul(F.linear(x, w)) if epilogue is Epilogue.SILU_MUL else F.linear(x, w)
        check_close(skinny_linear(x, w, epilogue, config=config), fp32_reference(x, w, epilogue), baseline)


def test_split_k_is_deterministic_and_resets_its_counters() -> None:
    from runtime.kernels.skinny_gemm_triton import _COUNTERS

    for weight_rows, k, epilogue in ((512, 2048, None), (6144, 1024, Epilogue.SILU_MUL)):
        x, w = operands(16, weight_rows, k, seed=1)
        first = skinny_linear(x, w, epilogue)
        for _ in range(20):
            assert torch.equal(skinny_linear(x, w, epilogue), first)
    torch.cuda.synchronize()
    assert not bool(_COUNTERS[torch.device("cuda", torch.cuda.current_device())].any())


def test_cuda_graph_replay_equals_eager_calls() -> None:
    """Ten split-K launches of two shapes captured in one graph: replays give eager results bit for bit, with new
    inputs copied into the captured buffers too."""
    layers = [operands(3, 1024, 2048, seed=i) + (None,) for i in range(5)]
    layers += [operands(3, 6144, 1024, seed=9 + i) + (Epilogue.SILU_MUL,) for i in range(5)]

    def run() -> list[torch.Tensor]:
        return [skinny_linear(x, w, epilogue) for x, w, epilogue in layers]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # warm-up: compiles, and allocates the arrival counters off the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    for step in range(3):
        for x, _, _ in layers:
            x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(captured, run()):
            assert torch.equal(got, want), step
