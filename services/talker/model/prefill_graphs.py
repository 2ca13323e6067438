"""CUDA graphs of the talker prefill, one per (rows, padded length) bucket.

An eager prefill launches ~1,700 small kernels from Python: ~60 ms for a 30-token prompt on the H200, paid by
every request before its first frame and, while it runs, by every other row waiting for its next frame. Replayed
from a graph it costs its GPU time. A batch is copied into the smallest bucket that holds it: rows past the batch's
own use the KV pool's scratch slot, positions past a prompt's end compute K/V that only that row's own later
frames overwrite (no query reads a key past its own position). Larger prefills run eagerly. Off CUDA the same
static buffers run eagerly (capture=False), which keeps the padding logic testable on CPU.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from runtime.graph_capture import GraphCapture
from services.talker.model.kv import KVPool
from services.talker.model.talker_lm import TalkerLM

log = logging.getLogger(__name__)

LENGTH_BUCKETS = (32, 64, 128, 256, 512, 1024)  # padded prompt lengths; talker prompts are user turns + 9


@dataclass
class _Shape:
    x: torch.Tensor  # (B, T, hidden) prompt embeddings
    positions: torch.Tensor  # (3, B, T) float32 M-RoPE positions
    slots: torch.Tensor  # (B,) long KV slots
    hidden: torch.Tensor | None = None  # (B, T, hidden) the graph's output, rewritten by every replay
    graph: torch.cuda.CUDAGraph | None = None


class PrefillGraphs:
    """Runs `TalkerLM` prefills through static per-bucket buffers, replaying a captured graph on CUDA."""

    def __init__(self, lm: TalkerLM, kv: KVPool, row_buckets: tuple[int, ...], max_tokens: int,
                 capture: bool) -> None:  # fmt: skip
        self.lm, self.kv = lm, kv
        if capture and not all(layer.mlp.experts.use_grouped_mm for layer in lm.layers):
            # the loop over experts reads their ids back to the host, which a capture cannot do
            raise ValueError("talker prefill graphs need the grouped-GEMM MoE: call lm.use_grouped_mm(True) first")
        # every bucket within the prefill token budget whose padded length a slot can hold
        self.buckets = sorted(((rows, length) for rows in row_buckets for length in LENGTH_BUCKETS
                               if rows * length <= max_tokens and length <= kv.capacity),
                              key=lambda b: (b[0] * b[1], b))  # fmt: skip
        self.graphs = GraphCapture() if capture else None
        self._shapes: dict[tuple[int, int], _Shape] = {}

    def bucket_for(self, rows: int, length: int) -> tuple[int, int] | None:
        """The smallest bucket holding `rows` prompts of up to `length` positions; None when none does."""
        return next(((b, t) for b, t in self.buckets if b >= rows and t >= length), None)

    def capture_all(self) -> None:
        """Capture every bucket now (at start) rather than on a request's time."""
        for bucket in self.buckets:
            self._get(bucket)

    def run(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor | None:
        """Final-normed hidden states `(B, T', hidden)` (T' >= T, valid until the next run) for the right-padded
        prompts `x` `(B, T, hidden)` at `positions` `(3, B, T)` in `slots`; None when no bucket holds them."""
        rows, length = x.shape[:2]
        bucket = self.bucket_for(rows, length)
        if bucket is None:
            return None
        shape = self._get(bucket)
        shape.x[:rows, :length].copy_(x)
        shape.positions[:, :rows, :length].copy_(positions)
        shape.slots[:rows].copy_(slots)
        shape.slots[rows:] = self.kv.scratch_slot
        if shape.graph is not None:
            shape.graph.replay()
        else:
            shape.hidden = self._forward(shape)
        assert shape.hidden is not None
        return shape.hidden[:rows]

    def _forward(self, shape: _Shape) -> torch.Tensor:
        length = shape.x.shape[1]
        # `length` given: the forward needs no host read of the start positions (capturable)
        return self.lm(shape.x, shape.positions, self.kv, shape.slots, shape.slots * 0, length=length)

    def _get(self, bucket: tuple[int, int]) -> _Shape:
        shape = self._shapes.get(bucket)
        if shape is None:
            rows, length = bucket
            p = self.lm.codec_head.weight
            shape = self._shapes[bucket] = _Shape(
                x=torch.zeros(rows, length, self.lm.cfg.hidden_size, device=p.device, dtype=p.dtype),
                positions=torch.zeros(3, rows, length, device=p.device),
                slots=torch.full((rows,), self.kv.scratch_slot, dtype=torch.long, device=p.device),
            )  # fmt: skip
            if self.graphs is not None:
                self._capture(shape, bucket)
        return shape

    def _capture(self, shape: _Shape, bucket: tuple[int, int]) -> None:
        t0, before = time.perf_counter(), torch.cuda.memory_reserved()
        assert self.graphs is not None
        shape.graph, shape.hidden = self.graphs.capture(lambda: self._forward(shape))
        log.info("talker: captured the prefill graph for %d rows x %d positions in %.2f s, %.1f MiB reserved",
                 *bucket, time.perf_counter() - t0, (torch.cuda.memory_reserved() - before) / 2**20)
