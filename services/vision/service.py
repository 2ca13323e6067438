"""The vision stage's domain: a request's items in, per-item embeddings and timings out (no protobuf here)."""
from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import torch

from runtime.config import EncoderConfig
from runtime.encode_batcher import BatchStats, EncodeBatcher, request_timings
from runtime.metrics import Metrics
from runtime.stage_device import is_device_fault
from runtime.transfer import to_host
from runtime.work_budget import WorkBudget
from services.vision.encoder import VisionEncoder
from services.vision.model import VisionOutput
from services.vision.preprocess import MediaFrames
from runtime.vision_processing import VisionProcessingConfig


@dataclass
class EncodeInput:
    request_id: str
    items: list[MediaFrames]  # frames already checked against their grids by the wire


@dataclass
class ItemOut:
    index: int
    output: VisionOutput  # on the host, in the tower's dtype; [tokens, out_hidden] each


@dataclass
class FinishedOut:
    queue_seconds: float  # submit to the first forward that held one of the request's items
    compute_seconds: float  # wall time of every distinct forward the request took part in


class VisionService:
    """Submits each item to one shared EncodeBatcher, so items of concurrent requests share a tower forward."""

    def __init__(self, encoder: VisionEncoder, metrics: Metrics, cfg: EncoderConfig) -> None:
        self.encoder = encoder
        self.metrics = metrics
        self.max_batch_patches = cfg.max_batch_size
        self.max_request_patches = cfg.max_request_size
        self.pending = WorkBudget("vision", "patches", cfg.max_pending_size, "vision.encoder.max_pending_size",
                                  cfg.max_waiting, "vision.encoder.max_waiting")
        self.batcher: EncodeBatcher[MediaFrames, VisionOutput] = EncodeBatcher(
            self._forward, size_of=lambda item: encoder.grid_of(item).num_patches,
            max_batch_size=cfg.max_batch_size, max_wait_s=cfg.batch_wait_ms / 1000,
            on_batch=self._record_batch, on_depth=metrics.get("omnimesh_queue_depth").set, is_fatal=is_device_fault)

    @property
    def processing(self) -> VisionProcessingConfig:
        return self.encoder.processing

    async def encode(self, inp: EncodeInput) -> AsyncIterator[ItemOut | FinishedOut]:
        """Each item's output in item order, as soon as it and those before it are done; then the timings."""
        timed = []
        async for t in self.batcher.submit_in_order(inp.items):
            timed.append(t)
            yield ItemOut(len(timed) - 1, t.result)
        queue, compute = request_timings(timed)
        self.metrics.get("omnimesh_queue_time_seconds").observe(queue)
        yield FinishedOut(queue, compute)

    def close(self) -> None:
        self.batcher.close()

    def _forward(self, items: Sequence[MediaFrames]) -> list[VisionOutput]:
        """One preprocessing pass and one tower forward; runs in the batcher's worker thread."""
        patches, grids = self.encoder.preprocessor.batch(items)
        out = self.encoder.tower(patches, grids)
        # One copy per output tensor for the whole batch, into pinned memory (a pageable copy of a long video's
        # features runs at a fraction of the link's speed), then one wait, so compute time is real.
        host = VisionOutput(to_host(out.merged), [to_host(d) for d in out.deepstack])
        if out.merged.is_cuda:
            torch.cuda.current_stream(out.merged.device).synchronize()
        return host.split(grids, self.encoder.tower.cfg.spatial_merge_size)

    def _record_batch(self, stats: BatchStats) -> None:
        self.metrics.get("omnimesh_encoder_latency_seconds").observe(stats.compute_seconds)
        self.metrics.get("omnimesh_encoder_items_per_batch").observe(stats.num_items)
