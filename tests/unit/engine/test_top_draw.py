"""The sampler's narrow-path kernel (runtime/engine/top_draw_triton.py) draws the tokens of its torch path
(`draw_among_top_reference`): in Triton's interpreter on CPU, compiled for sm_90 without spills, and on the GPU.

The interpreter and compile cases run this file as a script in a fresh process (TRITON_INTERPRET is read when triton
is first imported)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from runtime.engine.sampler import draw_among_top_reference

from tests.triton_scripts import assert_script_passes

HERE = Path(__file__).resolve()


def case(rows: int, width: int, vocab: int, seed: int, device: str = "cpu"
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """A descending top-`width` of random scaled logits with some ties and -inf, ids drawn from `vocab` without
    repeats, each row's (top_k, top_p, min_p) across what the narrow path takes, and exponential draws."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, width, generator=gen) * 2
    values[:, 5:9] = values[:, 5:6]  # a run of ties inside every row
    values[rows // 2:, width - 3:] = float("-inf")  # suppressed tokens at the tail of some rows
    values = values.sort(dim=-1, descending=True).values
    ids = torch.stack([torch.randperm(vocab, generator=gen)[:width] for _ in range(rows)])
    top_k = torch.randint(1, width + 1, (rows,), generator=gen).float()
    top_k[::4] = 0  # top-k off: every one of the `width` candidates may stay
    top_p = torch.rand(rows, generator=gen) * 0.9 + 0.1
    top_p[1::3] = 1.0
    min_p = torch.rand(rows, generator=gen) * 0.2
    min_p[::2] = 0.0
    knobs = torch.stack((top_k, top_p, min_p), dim=1)
    draws = torch.empty(rows, width).exponential_(generator=gen)
    return tuple(t.to(device) for t in (values, ids, knobs, draws))  # type: ignore[return-value]


def test_the_kernel_draws_the_reference_tokens_in_the_interpreter() -> None:
    assert_script_passes(HERE, "interpret", interpret=True, timeout=180)


def test_the_kernel_compiles_for_sm90_without_spills() -> None:
    assert_script_passes(HERE, "compile", interpret=False, timeout=180)


def test_the_reference_draws_only_kept_tokens() -> None:
    values, ids, knobs, draws = case(64, 64, 1000, seed=7)
    knobs[:, 0] = 1  # top-k 1: the best token, whatever the draws
    assert torch.equal(draw_among_top_reference(values, ids, knobs, draws, 1000), ids[:, 0])


@pytest.mark.gpu
def test_the_kernel_draws_the_reference_tokens_on_the_gpu() -> None:
    from runtime.engine.top_draw_triton import draw_among_top_triton

    for rows, width, vocab, seed in ((1, 64, 152064, 1), (32, 64, 152064, 2), (300, 64, 152064, 3), (9, 40, 40, 4)):
        args = case(rows, width, vocab, seed, "cuda")
        got, want = draw_among_top_triton(*args, vocab), draw_among_top_reference(*args, vocab)
        assert (got == want).float().mean() >= 0.99, (rows, width)  # only float-rounding near-ties may differ


def _interpret() -> None:
    from runtime.engine.top_draw_triton import draw_among_top_triton
    from tests.unit.kernels.interpreter_check import patch_numpy_scalars

    patch_numpy_scalars()
    torch.set_num_threads(1)
    for rows, width, vocab, seed in ((16, 64, 5000, 1), (16, 64, 64, 2), (8, 40, 40, 3), (1, 64, 152064, 4)):
        args = case(rows, width, vocab, seed)
        got, want = draw_among_top_triton(*args, vocab), draw_among_top_reference(*args, vocab)
        assert torch.equal(got, want), (rows, width, vocab, got, want)


def _compile() -> None:
    from runtime.engine.top_draw_triton import draw_among_top_triton
    from tests.unit.kernels.compile_check import assert_no_spills, install

    install()
    for width in (64, 40):
        draw_among_top_triton(*case(2, width, 1000, seed=0), 1000)
    assert_no_spills()


if __name__ == "__main__":
    {"interpret": _interpret, "compile": _compile}[sys.argv[1]]()
