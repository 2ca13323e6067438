"""CUDA graphs for streamed Code2Wav chunks: one graph per (batch bucket, frames, context frames), least recently
used evicted, the batch padded up to its bucket.

A chunk step is hundreds of small kernels; launching them eagerly takes longer than the GPU needs to run them,
so replaying a captured graph is most of the streaming speed-up at small batches. Streams keep their call
shapes few (fixed window cache, final chunks padded to the nominal size), so a handful of graphs per bucket
covers a whole utterance.
"""
from __future__ import annotations

import contextlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, NamedTuple

import torch

from runtime.graph_capture import GraphCapture

if TYPE_CHECKING:
    from services.talker.model.code2wav import Code2Wav, StreamStep


class GraphKey(NamedTuple):
    bucket: int  # batch rows the graph runs (the real ones first, the rest stale padding)
    frames: int  # new frames per row
    context: int  # pre-transformer outputs re-vocoded before them


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """Powers of two below max_batch, then max_batch itself: 1, 2, 4, ..., max_batch."""
    if max_batch < 1:
        raise ValueError(f"Code2Wav graphs max_batch={max_batch}: must be >= 1")
    buckets = [1 << i for i in range(max_batch.bit_length()) if 1 << i < max_batch]
    return (*buckets, max_batch)


def stream_signatures(first_chunk: int, chunk: int, left_context: int) -> list[tuple[int, int]]:
    """The (frames, context frames) calls one stream makes, in order: (4, 0), (25, 4), (25, 11) for the defaults."""
    calls, frames, context = [], first_chunk, 0
    while (frames, context) not in calls:
        calls.append((frames, context))
        frames, context = chunk, min(left_context, context + frames)
    return calls


def bucket_for(batch: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket holding `batch` rows."""
    for b in buckets:
        if b >= batch:
            return b
    raise ValueError(f"batch of {batch} streams exceeds the largest Code2Wav graph bucket {buckets[-1]}: split it")


@contextlib.contextmanager
def cudnn_benchmark() -> Iterator[None]:
    """cuDNN times its algorithms for each new shape: worth it where each shape is captured once, replayed often."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


@dataclass
class _Entry:
    """Static inputs of one signature and, once captured, its graph and the outputs its replays overwrite."""

    codes: torch.Tensor  # (bucket, G, frames) long
    past: torch.Tensor  # (layers, 2, bucket, KVH, window-1, D)
    past_valid: torch.Tensor  # (bucket, window-1) bool
    context: torch.Tensor | None  # (bucket, context, dim)
    graph: torch.cuda.CUDAGraph | None = None
    out: StreamStep | None = None


class Code2WavGraphs:
    """Runs `Code2Wav.stream_step` at fixed shapes: copy the batch in, replay (or run eagerly without capture),
    copy the real rows out. The copies out matter: the next replay overwrites the graph's outputs."""

    def __init__(self, model: Code2Wav, max_batch: int = 32, max_graphs: int = 32, capture: bool = True) -> None:
        if capture and not model.code_offset.is_cuda:
            raise ValueError("Code2Wav CUDA graphs need the model on a CUDA device; use capture=False elsewhere")
        if max_graphs < 1:
            raise ValueError(f"Code2Wav graphs max_graphs={max_graphs}: must be >= 1")
        self.model = model
        self.buckets = batch_buckets(max_batch)
        self.max_graphs = max_graphs
        self.entries: OrderedDict[GraphKey, _Entry] = OrderedDict()
        # the window cache inputs depend on the bucket only: graphs replay one at a time, so they share them
        self._window_inputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # graphs replay one at a time: they share memory; thread-local, as the engine thread captures while other
        # threads may touch the GPU
        self.graphs = GraphCapture(thread_local=True) if capture else None

    @property
    def max_batch(self) -> int:
        return self.buckets[-1]

    def warm_up(self, first_chunk: int, chunk: int, left_context: int) -> None:
        """Capture now, for every bucket, the calls streams of this geometry make, rather than on first use.

        Short final chunks are padded to the nominal size, so these are all the calls such streams make.
        The steady call goes first; capturing stops at `max_graphs` (the rest capture on first use).
        """
        for frames, context in reversed(stream_signatures(first_chunk, chunk, left_context)):
            for bucket in self.buckets:
                if len(self.entries) >= self.max_graphs:
                    return
                self._entry(GraphKey(bucket, frames, context))

    @torch.no_grad()
    def run(
        self, codes: torch.Tensor, past: torch.Tensor, past_valid: torch.Tensor, context: torch.Tensor | None
    ) -> StreamStep:
        """`stream_step` for `codes.shape[0] <= max_batch` rows."""
        from services.talker.model.code2wav import StreamStep

        rows = codes.shape[0]
        key = GraphKey(bucket_for(rows, self.buckets), codes.shape[2], 0 if context is None else context.shape[1])
        entry = self._entry(key)
        entry.codes[:rows].copy_(codes)
        entry.past[:, :, :rows].copy_(past)
        entry.past_valid[:rows].copy_(past_valid)
        if context is not None:
            assert entry.context is not None
            entry.context[:rows].copy_(context)
        if entry.graph is None:
            out = self.model.stream_step(entry.codes, entry.past, entry.past_valid, entry.context)
        else:
            entry.graph.replay()
            assert entry.out is not None
            out = entry.out
        return StreamStep(out.wav[:rows].clone(), out.past[:, :, :rows].clone(), out.hidden[:rows].clone())

    def _entry(self, key: GraphKey) -> _Entry:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
            return entry
        while len(self.entries) >= self.max_graphs:
            self.entries.popitem(last=False)
        entry = self._inputs(key)
        if self.graphs is not None:
            self._capture(entry)
        self.entries[key] = entry
        return entry

    def _inputs(self, key: GraphKey) -> _Entry:
        """Zeroed static inputs: padding rows then hold valid (if meaningless) data, so they stay finite."""
        m, cfg = self.model, self.model.cfg
        device = m.code_offset.device
        codes = torch.zeros(key.bucket, cfg.num_quantizers, key.frames, dtype=torch.long, device=device)
        if key.bucket not in self._window_inputs:
            past = m.empty_window().expand(-1, -1, key.bucket, -1, -1, -1).contiguous()
            # padding rows see no cached positions: only each frame's own window, never an empty softmax
            self._window_inputs[key.bucket] = past, m.window_valid([0] * key.bucket)
        past, past_valid = self._window_inputs[key.bucket]
        dtype = m.code_embedding.weight.dtype
        context = None
        if key.context:
            context = torch.zeros(key.bucket, key.context, cfg.hidden_size, dtype=dtype, device=device)
        return _Entry(codes, past, past_valid, context)

    @torch.no_grad()
    def _capture(self, entry: _Entry) -> None:
        args = (entry.codes, entry.past, entry.past_valid, entry.context)
        assert self.graphs is not None
        with cudnn_benchmark():  # the warm-ups let cuDNN pick its algorithms outside the capture
            entry.graph, entry.out = self.graphs.capture(lambda: self.model.stream_step(*args))
