"""GPU: the persistent dense decoder step (runtime/kernels/dense_step.py) at the code predictor's dims in bf16.

The persistent launch (phases separated by grid barriers) must give the bytes of the same kernel launched once per
phase, which proves the barrier: a program that read a phase's input before every program had written it would
differ. Both must match the plain-PyTorch reference as closely as bf16 allows, over a frame's 15 steps whose cache
grows, and a CUDA graph of the frame must replay to the same bytes (the barrier counters reset themselves).
"""
from __future__ import annotations

import pytest
import torch

from runtime.kernels.dense_step import (
    DenseStack, DenseStepBuffers, Tiling, default_tiling, dense_step, dense_step_reference,
)
from tests.unit.kernels.kernel_data import needs_cuda, rel_err

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]
BF16 = torch.bfloat16
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, POSITIONS, GROUPS = 5, 1024, 16, 8, 128, 3072, 2048, 32, 15


def predictor_like(seed: int) -> tuple[DenseStack, list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Random weights at the code predictor's dims (std 0.02, norms near 1), 15 heads, rotary tables."""
    gen = torch.Generator().manual_seed(seed)
    w = lambda *shape: (torch.randn(*shape, generator=gen) * 0.02).to("cuda", BF16)  # noqa: E731
    norm = lambda *shape: (1 + torch.randn(*shape, generator=gen) * 0.1).to("cuda", BF16)  # noqa: E731
    stack = DenseStack(w(LAYERS, (HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), w(LAYERS, HIDDEN, HEADS * HEAD_DIM),
                       w(LAYERS, 2 * INTER, HIDDEN), w(LAYERS, HIDDEN, INTER), norm(LAYERS, HIDDEN),
                       norm(LAYERS, HIDDEN), norm(LAYERS, HEAD_DIM), norm(LAYERS, HEAD_DIM), norm(HIDDEN), HEADS,
                       KV_HEADS, HEAD_DIM, 1e-6)  # fmt: skip
    inv = 1.0 / (1e6 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    angles = torch.arange(POSITIONS).float()[:, None] * inv
    angles = torch.cat((angles, angles), dim=-1)
    return stack, [w(VOCAB, HIDDEN) for _ in range(GROUPS)], angles.cos().to("cuda", BF16), angles.sin().to("cuda", BF16)


def frame(stack: DenseStack, heads: list[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor,
          buffers: DenseStepBuffers, inputs: list[torch.Tensor], mode: str,
          tiling: Tiling | None = None) -> list[torch.Tensor]:  # fmt: skip
    """The 15 steps of a frame with given inputs (first step two positions a row): each step's logits."""
    out, start = [], 0
    for head, x in zip(heads, inputs):
        batch, steps = x.shape[0], x.shape[1]
        buffers.s0[:batch * steps].copy_(x.reshape(batch * steps, -1))
        if mode == "reference":
            logits = dense_step_reference(stack, head, buffers, batch, steps, start, cos, sin)
        else:
            logits = torch.empty(batch, head.shape[0], device="cuda")
            dense_step(stack, head, buffers, batch, steps, start, cos, sin, logits, persistent=mode == "persistent",
                       tiling=tiling)
        out.append(logits)
        start += steps
    return out


def frame_inputs(batch: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 2 if g == 0 else 1, HIDDEN, generator=gen).to("cuda", BF16) for g in range(GROUPS)]


@pytest.mark.parametrize("split", [1, 2], ids=["whole-k", "split-k"])
@pytest.mark.parametrize("batch", [1, 3, 8, 16])
def test_persistent_equals_phase_launches_and_tracks_the_reference(batch: int, split: int) -> None:
    stack, heads, cos, sin = predictor_like(batch)
    tiling = default_tiling(stack, heads[0])._replace(split_narrow=split)
    inputs = frame_inputs(batch, seed=100 + batch)
    buffers = {mode: DenseStepBuffers.allocate(stack, 16, POSITIONS) for mode in ("persistent", "phases", "reference")}
    got = {mode: frame(stack, heads, cos, sin, buffers[mode], inputs, mode, tiling) for mode in buffers}
    assert not buffers["persistent"].counter.any() and not buffers["phases"].counter.any()
    for step, (persistent, phases, reference) in enumerate(zip(*got.values())):
        assert torch.equal(persistent, phases), f"step {step}: the barrier let a phase read unwritten inputs"
        assert rel_err(persistent, reference) < 2e-2, (step, rel_err(persistent, reference))
        # the same pick, except where the reference's own best two are within bf16 noise
        ours = reference.gather(-1, persistent.argmax(-1, keepdim=True)).squeeze(-1)
        assert (ours >= reference.amax(-1) - 1e-2 * reference.abs().amax()).all(), step


def test_graph_replay_and_repeated_launches_give_the_same_bytes() -> None:
    stack, heads, cos, sin = predictor_like(7)
    inputs = frame_inputs(4, seed=7)
    buffers = DenseStepBuffers.allocate(stack, 16, POSITIONS)
    eager = frame(stack, heads, cos, sin, buffers, inputs, "persistent")
    again = frame(stack, heads, cos, sin, buffers, inputs, "persistent")
    assert all(torch.equal(a, b) for a, b in zip(eager, again))
    assert not buffers.counter.any()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = frame(stack, heads, cos, sin, buffers, inputs, "persistent")
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(eager, captured))
    assert not buffers.counter.any()
