"""CUDA graphs of the talker frame (code predictor + talker step) per batch bucket and sampling mode.

A frame is ~2,000 small kernels; launched one by one from Python it costs ~170 ms of host time against ~15 ms
of GPU work, so on CUDA each (bucket, sampling) shape is captured once and replayed. A batch is copied into the
bucket's static inputs; rows past the batch's own are padding that reads and writes only the KV pool's scratch
slot. Off CUDA the same static buffers run eagerly (capture=False), which keeps the padding logic testable on CPU.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields

import torch

from runtime.graph_capture import GraphCapture
from services.talker.model.frame_step import (
    MODES, NUM_KNOBS, PENALTY, PRED_TEMPERATURE, PRED_TOP_P, TEMPERATURE, TOP_P, FrameInputs, FrameOutputs, FrameStep,
    Mode,
)

log = logging.getLogger(__name__)


def batch_buckets(max_rows: int) -> tuple[int, ...]:
    """Powers of two below max_rows, then max_rows itself."""
    out, b = [], 1
    while b < max_rows:
        out.append(b)
        b *= 2
    return (*out, max_rows)


@dataclass
class _Captured:
    inputs: FrameInputs
    graph: torch.cuda.CUDAGraph | None = None
    outputs: FrameOutputs | None = None


class FrameGraphs:
    """Replays (or, off CUDA, runs) `FrameStep` through static per-bucket buffers."""

    def __init__(self, step: FrameStep, buckets: tuple[int, ...], capture: bool) -> None:
        self.step = step
        self.buckets = tuple(sorted(buckets))
        self.graphs = GraphCapture() if capture else None
        self._shapes: dict[tuple[int, Mode], _Captured] = {}

    def bucket_for(self, rows: int) -> int:
        for b in self.buckets:
            if b >= rows:
                return b
        raise ValueError(f"{rows} rows exceed the largest frame graph bucket {self.buckets[-1]}")

    def capture_all(self) -> None:
        """Capture every bucket in every mode now (at start) rather than on a first request's time."""
        for bucket in self.buckets:
            for mode in MODES:
                self._get(bucket, mode)

    def run(self, inp: FrameInputs, mode: Mode) -> FrameOutputs:
        """One frame for the `B` rows of `inp` (device tensors); outputs are views valid until the next run."""
        rows = inp.slots.shape[0]
        shape = self._get(self.bucket_for(rows), mode)
        self._load(shape.inputs, inp, rows, mode)
        if shape.graph is not None:
            shape.graph.replay()
            out = shape.outputs
        else:
            out = self.step(shape.inputs, mode)
        assert out is not None
        return FrameOutputs(out.frames[:rows], out.hidden[:rows], out.next_code0[:rows])

    def _load(self, static: FrameInputs, inp: FrameInputs, rows: int, mode: Mode) -> None:
        for f in fields(FrameInputs):
            if mode == "greedy" and f.name.endswith("noise"):
                continue  # the greedy graph never reads the noise
            getattr(static, f.name)[:rows].copy_(getattr(inp, f.name))
        _pad(static, rows, self.step.kv.scratch_slot)

    def _get(self, bucket: int, mode: Mode) -> _Captured:
        shape = self._shapes.get((bucket, mode))
        if shape is None:
            shape = self._shapes[(bucket, mode)] = _Captured(self._static_inputs(bucket))
            if self.graphs is not None:
                self._capture(shape, bucket, mode)
        return shape

    def _static_inputs(self, bucket: int) -> FrameInputs:
        model, device = self.step.model, self.step.model.device
        cfg = model.cfg
        zeros = lambda *shape, dtype=torch.float32: torch.zeros(*shape, dtype=dtype, device=device)  # noqa: E731
        inputs = FrameInputs(
            text_ids=zeros(bucket, dtype=torch.long), positions=zeros(bucket),
            slots=zeros(bucket, dtype=torch.long), cache_len=zeros(bucket, dtype=torch.long),
            knobs=zeros(bucket, NUM_KNOBS), talker_noise=zeros(bucket, cfg.lm.vocab_size),
            predictor_noise=zeros(bucket, cfg.num_code_groups - 1, cfg.code_predictor.vocab_size),
        )  # fmt: skip
        _pad(inputs, 0, self.step.kv.scratch_slot)
        return inputs

    def _capture(self, shape: _Captured, bucket: int, mode: Mode) -> None:
        t0, before = time.perf_counter(), torch.cuda.memory_reserved()
        assert self.graphs is not None
        shape.graph, shape.outputs = self.graphs.capture(lambda: self.step(shape.inputs, mode))
        log.info("talker: captured the frame graph for %d rows (%s) in %.2f s, %.1f MiB reserved", bucket,
                 mode, time.perf_counter() - t0,
                 (torch.cuda.memory_reserved() - before) / 2**20)


def _pad(inputs: FrameInputs, rows: int, scratch_slot: int) -> None:
    """Rows from `rows` on: the scratch slot, an empty cache, harmless greedy knobs."""
    inputs.slots[rows:] = scratch_slot
    inputs.cache_len[rows:] = 0
    knobs = inputs.knobs[rows:]
    knobs.zero_()
    for column in (TEMPERATURE, TOP_P, PRED_TEMPERATURE, PRED_TOP_P, PENALTY):
        knobs[:, column] = 1.0
