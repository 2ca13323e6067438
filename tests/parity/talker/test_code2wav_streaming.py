"""Our streaming Code2Wav against one full decode of the same codes, on the demo checkpoint.

Measured here (200 random frames, first chunk 4, then 25; demo weights, |wav| <= 0.73):

| left_context (frames) | max abs diff | rms diff |
|---|---|---|
| 1 | 0.28 | 8.6e-3 |
| 2 | 0.094 | 2.9e-3 |
| 4 | 0.020 | 3.1e-4 |
| 8 | 1.4e-5 | 1.3e-7 |
| >= 9 (`conv_receptive_frames()` = 11) | 5.4e-7 | 4.8e-8 (fp32 rounding) |

The pre-transformer is cached over its whole sliding window, so only the convolution stack's look-back
(about 9 frames at these rates) matters; the error is confined to the first samples after each chunk
boundary. The reference's `chunked_decode` by contrast drops `held_back` (555) samples at every boundary.
"""
from __future__ import annotations

from typing import Iterator

import pytest
import torch

from services.talker.model.code2wav_graphs import Code2WavGraphs
from services.talker.model.code2wav_stream import StreamingCode2Wav, decode_streams
from services.talker.model.load import TalkerModel


def stream_all(stream: StreamingCode2Wav, codes: torch.Tensor) -> list[torch.Tensor]:
    pieces = []
    for f in range(codes.shape[1]):
        stream.push(codes[:, f])
        pieces += stream.pull()
    return pieces + stream.pull(final=True)


def random_codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (16, frames), generator=torch.Generator().manual_seed(seed))


def test_streaming_with_receptive_context_is_the_full_decode(talker_model: TalkerModel) -> None:
    c2w = talker_model.code2wav
    codes = random_codes(130, seed=0)
    with torch.no_grad():
        full = c2w(codes[None])[0, 0]
    pieces = stream_all(StreamingCode2Wav(c2w, 4, 25, c2w.conv_receptive_frames()), codes)
    # the first piece exists after 4 frames: everything but the held-back tail of frame 4
    assert pieces[0].shape[0] == 4 * 1920 - c2w.held_back
    out = torch.cat(pieces)
    assert out.shape == full.shape
    assert (out - full).abs().max().item() <= 1e-5 * full.abs().max().item()


@pytest.mark.parametrize(
    ("left_context", "max_bound", "rms_bound"), [(1, 0.4, 1.5e-2), (4, 0.04, 1e-3), (8, 1e-4, 1e-6)]
)
def test_short_context_error_is_bounded(talker_model: TalkerModel, left_context: int, max_bound: float,
                                        rms_bound: float) -> None:  # fmt: skip
    c2w = talker_model.code2wav
    codes = random_codes(200, seed=0)
    with torch.no_grad():
        full = c2w(codes[None])[0, 0]
    out = torch.cat(stream_all(StreamingCode2Wav(c2w, 4, 25, left_context), codes))
    diff = out - full
    assert out.shape == full.shape
    assert diff.abs().max().item() <= max_bound
    assert diff.pow(2).mean().sqrt().item() <= rms_bound


def test_batched_streams_equal_each_alone(talker_model: TalkerModel) -> None:
    """Three streams at different phases share calls whenever their chunk shapes agree."""
    c2w = talker_model.code2wav
    lengths = (60, 37, 90)
    codes = [random_codes(n, seed=n) for n in lengths]
    alone = [torch.cat(stream_all(StreamingCode2Wav(c2w, 3, 10, 11), c)) for c in codes]
    streams = [StreamingCode2Wav(c2w, 3, 10, 11) for _ in lengths]
    got: list[list[torch.Tensor]] = [[] for _ in lengths]
    for t in range(max(lengths)):
        for s, c in zip(streams, codes):
            if t < c.shape[1]:
                s.push(c[:, t])
        finals = [t == c.shape[1] - 1 for c in codes]
        for i, pieces in enumerate(decode_streams(c2w, streams, finals)):
            got[i] += pieces
    for a, b in zip(alone, got):
        joined = torch.cat(b)
        assert joined.shape == a.shape
        assert (joined - a).abs().max().item() <= 1e-5


def test_chunk_sizes_must_be_positive(talker_model: TalkerModel) -> None:
    with pytest.raises(ValueError, match="left_context=0"):
        StreamingCode2Wav(talker_model.code2wav, 4, 25, 0)


@pytest.fixture
def fixed_shapes(talker_model: TalkerModel) -> Iterator[Code2WavGraphs]:
    """The graphs' shape discipline without capturing (CPU): batch buckets, padded finals, eviction."""
    graphs = talker_model.code2wav.enable_cuda_graphs(max_batch=4, max_graphs=2, capture=False)
    yield graphs
    talker_model.code2wav.graphs = None


def test_fixed_shapes_equal_eager_streaming(talker_model: TalkerModel, fixed_shapes: Code2WavGraphs) -> None:
    """Six streams (more than the largest bucket of 4), short finals padded to 10 frames, graphs evicted."""
    c2w = talker_model.code2wav
    lengths = (33, 21, 16, 24, 12, 40)
    codes = [random_codes(n, seed=n) for n in lengths]
    c2w.graphs = None
    alone = [torch.cat(stream_all(StreamingCode2Wav(c2w, 4, 10, 11), c)) for c in codes]
    c2w.graphs = fixed_shapes
    streams = [StreamingCode2Wav(c2w, 4, 10, 11) for _ in lengths]
    got: list[list[torch.Tensor]] = [[] for _ in lengths]
    for t in range(max(lengths)):
        for s, c in zip(streams, codes):
            if t < c.shape[1]:
                s.push(c[:, t])
        for i, pieces in enumerate(decode_streams(c2w, streams, [t == c.shape[1] - 1 for c in codes])):
            got[i] += pieces
    for a, b in zip(alone, got):
        joined = torch.cat(b)
        assert joined.shape == a.shape
        assert (joined - a).abs().max().item() <= 1e-5
    assert len(fixed_shapes.entries) == 2  # (4, 0), (10, 4), (10, 11) over buckets 1, 2 and 4, bounded at 2
    assert [s.closed for s in streams] == [True, True, True, False, True, True]  # a short tail: padded, cache gone
    with pytest.raises(ValueError, match="after the final chunk"):
        streams[0].push(codes[0][:, 0])


def test_exact_final_chunk_keeps_the_stream_open(talker_model: TalkerModel, fixed_shapes: Code2WavGraphs) -> None:
    """A final chunk that needed no padding leaves a usable cache: more frames may follow."""
    c2w = talker_model.code2wav
    codes = random_codes(24, seed=5)
    stream = StreamingCode2Wav(c2w, 4, 10, 11)
    stream.push(codes[:, :14])
    first = stream.pull(final=True)
    stream.push(codes[:, 14:])
    out = torch.cat(first + stream.pull(final=True))
    c2w.graphs = None
    with torch.no_grad():
        full = c2w(codes[None])[0, 0]
    assert out.shape == full.shape
    assert (out - full).abs().max().item() <= 1e-5 * full.abs().max().item()
