"""A pick for rows whose top_k is in 1..width: the kernel where it runs (CUDA with triton), else the reference."""
from __future__ import annotations

import torch

from runtime.kernels._backend import triton_importable
from runtime.sampler.knobs import RowKnobs
from runtime.sampler.rules import pick_reference

# Up to this many ids the kernel finds a row's best itself (the talker's vocabularies; compiled without spills at
# 4,096 lanes); a wider row's torch.topk runs first and the kernel draws among its candidates.
MAX_ROW_VOCAB = 4096


def pick(logits: torch.Tensor, uniforms: torch.Tensor, knobs: RowKnobs, kernel: bool | None = None) -> torch.Tensor:
    """One token per row `(B,)` long from fp32 logits `(B, V)`: argmax for greedy rows, a draw for the others from
    their uniforms `(B, V)` by vocabulary id. `kernel`: None where it runs; False the reference (what the tests
    compare it with). No host sync either way."""
    if kernel is None:
        kernel = logits.is_cuda and triton_importable()
    if not kernel:
        return pick_reference(logits, uniforms, knobs)
    from runtime.sampler.pick_triton import pick_triton  # imports triton

    if logits.shape[-1] <= MAX_ROW_VOCAB:
        return pick_triton(logits, uniforms, knobs)
    values, ids = logits.topk(knobs.width, dim=-1)
    return pick_triton(values, uniforms, knobs, ids=ids)
