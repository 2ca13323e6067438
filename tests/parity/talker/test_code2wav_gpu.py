"""Code2Wav on CUDA: the Triton SnakeBeta equals the reference, and streaming through CUDA graphs equals eager."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch
from torch import nn

from bench.talker.bench_talker import real_config
from services.talker.model.code2wav import Code2Wav
from services.talker.model.code2wav_snake import snake_reference
from services.talker.model.code2wav_stream import StreamingCode2Wav, decode_streams
from services.talker.model.config import parse_talker_config
from services.talker.model.load import cast_parameters, load_talker_model

pytestmark = pytest.mark.gpu


@pytest.fixture
def exact_fp32() -> Iterator[None]:
    """TF32 is the default for cuDNN convolutions: not an fp32 comparison."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def stream_in_lockstep(c2w: Code2Wav, codes: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    """Chunks of 4 then 25 frames; streams of different lengths pushed `step` frames at a time."""
    streams = [StreamingCode2Wav(c2w, 4, 25, 11) for _ in codes]
    got: list[list[torch.Tensor]] = [[] for _ in codes]
    for t in range(0, max(c.shape[1] for c in codes), step):
        for s, c in zip(streams, codes):
            if t < c.shape[1]:
                s.push(c[:, t : t + step])
        finals = [t + step >= c.shape[1] for c in codes]
        for i, pieces in enumerate(decode_streams(c2w, streams, finals)):
            got[i] += pieces
    return [torch.cat(pieces).float() for pieces in got]


def graphs_vs_eager(c2w: Code2Wav, codes: list[torch.Tensor], step: int) -> tuple[list[torch.Tensor], ...]:
    c2w.graphs = None
    eager = stream_in_lockstep(c2w, codes, step)
    graphs = c2w.enable_cuda_graphs(max_batch=4)
    try:
        replayed = stream_in_lockstep(c2w, codes, step)
        assert graphs.entries and all(e.graph is not None for e in graphs.entries.values())
    finally:
        c2w.graphs = None
    return eager, replayed


def test_snake_triton_bf16() -> None:
    from services.talker.model.code2wav_snake_triton import snake_triton  # imports triton

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(3, 1000, 96, device="cuda", generator=gen).bfloat16() * 3
    a, inv_b = torch.rand(96, device="cuda", generator=gen) * 4, torch.rand(96, device="cuda", generator=gen) + 0.5
    got, ref = snake_triton(x, a, inv_b, 54), snake_reference(x, a, inv_b, 54)
    assert torch.equal(got[:, :54], torch.zeros_like(got[:, :54]))
    torch.testing.assert_close(got.float(), ref.float(), rtol=1e-2, atol=1e-2)


def test_graphs_equal_eager_fp32(demo_ckpt: Path, exact_fp32: None) -> None:
    """Demo checkpoint, fp32: five streams (bucket 4 padded, and split), short finals padded, several chunks a call."""
    c2w = load_talker_model(demo_ckpt, "cuda", torch.float32).code2wav
    gen = torch.Generator().manual_seed(0)
    codes = [torch.randint(0, 2048, (16, n), generator=gen).cuda() for n in (90, 61, 33, 4, 75)]
    for step in (1, 80):  # one frame a call; several chunks, one graph replayed twice, a call
        eager, replayed = graphs_vs_eager(c2w, codes, step)
        for a, b in zip(eager, replayed):
            assert a.shape == b.shape
            # cuDNN may time other fp32 algorithms for the graphs' padded shapes: not bit-equal, but close
            assert (a - b).abs().max().item() <= 1e-4 * max(a.abs().max().item(), 1e-3)


def test_graphs_equal_eager_real_dims_bf16() -> None:
    """The released widths (hidden 1024, decoder 1536) in bf16 with random weights: cuDNN's NHWC paths and the GEMMs."""
    torch.manual_seed(0)
    with torch.device("cuda"):
        c2w = Code2Wav(parse_talker_config(real_config()).code2wav)
    for name, p in c2w.named_parameters():
        nn.init.ones_(p) if name.endswith("norm.weight") else nn.init.normal_(p, std=0.02)
    cast_parameters(c2w, torch.bfloat16).eval().requires_grad_(False)  # rotary frequencies stay fp32
    gen = torch.Generator().manual_seed(1)
    codes = [torch.randint(0, 2048, (16, n), generator=gen).cuda() for n in (70, 41, 29)]
    eager, replayed = graphs_vs_eager(c2w, codes, 5)
    for a, b in zip(eager, replayed):
        assert a.shape == b.shape
        assert (a - b).norm().item() <= 2e-2 * a.norm().item()
