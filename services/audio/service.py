"""The audio stage's domain: a request's clips in, per-clip embeddings and timings out (no protobuf here).

Batching counts mel frames (100 per second of 16 kHz audio): `mesh.audio.encoder.max_batch_size` frames per
forward, `max_request_size` frames per Encode call.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import torch

from runtime.config import EncoderConfig
from runtime.encode_batcher import BatchStats, EncodeBatcher, request_timings
from runtime.metrics import Metrics
from runtime.stage_device import is_device_fault
from runtime.work_budget import WorkBudget
from services.audio.features import LogMelExtractor, MelConfig
from services.audio.model import AudioEncoder


@dataclass
class EncodeInput:
    request_id: str
    clips: list[torch.Tensor]  # float32 [samples] each, on the host, already checked by the wire


@dataclass
class ClipOut:
    index: int
    embeddings: torch.Tensor  # [tokens, output_dim] on the host, in the encoder's dtype


@dataclass
class FinishedOut:
    queue_seconds: float  # submit to the first forward that held one of the request's clips
    compute_seconds: float  # wall time of every distinct forward the request took part in


@dataclass(frozen=True)
class AudioLimits:
    """What this replica accepts, in samples (the wire's unit) and mel frames (the batcher's)."""

    min_samples: int  # shortest clip: the log-mel front end's reflect padding and at least one mel frame
    max_request_frames: int
    max_batch_frames: int
    hop_length: int
    sampling_rate: int

    @property
    def max_request_seconds(self) -> float:
        return self.max_request_frames * self.hop_length / self.sampling_rate

    @property
    def max_batch_seconds(self) -> float:
        return self.max_batch_frames * self.hop_length / self.sampling_rate


class AudioService:
    """Log-mel and AuT on the encoder's device; every clip goes to one shared EncodeBatcher, so clips of concurrent
    requests share one forward."""

    def __init__(self, extractor: LogMelExtractor, encoder: AudioEncoder, metrics: Metrics,
                 cfg: EncoderConfig) -> None:
        self.extractor = extractor
        self.encoder = encoder
        self.metrics = metrics
        mel = extractor.config
        self.limits = AudioLimits(mel.min_samples, cfg.max_request_size, cfg.max_batch_size, mel.hop_length,
                                  mel.sampling_rate)
        self.pending = WorkBudget("audio", "mel frames", cfg.max_pending_size, "audio.encoder.max_pending_size",
                                  cfg.max_waiting, "audio.encoder.max_waiting")
        self.batcher: EncodeBatcher[torch.Tensor, torch.Tensor] = EncodeBatcher(
            self._forward, size_of=lambda clip: mel.num_frames(clip.shape[0]),
            max_batch_size=cfg.max_batch_size, max_wait_s=cfg.batch_wait_ms / 1000,
            on_batch=self._record_batch, on_depth=metrics.get("omnimesh_queue_depth").set, is_fatal=is_device_fault)

    @property
    def mel_config(self) -> MelConfig:
        return self.extractor.config

    async def encode(self, inp: EncodeInput) -> AsyncIterator[ClipOut | FinishedOut]:
        """Each clip's embeddings in clip order, as soon as it and those before it are done; then the timings."""
        timed = []
        async for t in self.batcher.submit_in_order(inp.clips):
            timed.append(t)
            yield ClipOut(len(timed) - 1, t.result)
        queue, compute = request_timings(timed)
        self.metrics.get("omnimesh_queue_time_seconds").observe(queue)
        yield FinishedOut(queue, compute)

    def close(self) -> None:
        self.batcher.close()

    def _forward(self, clips: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """One log-mel pass and one encoder forward over every clip; runs in the batcher's worker thread."""
        mels = self.extractor(list(clips))  # [mel_bins, T_i] each, on the encoder's device
        # One device-to-host copy for the whole batch; it also waits for the GPU, so compute time is real.
        packed = self.encoder.encode(mels).cpu()  # [sum tokens, output_dim]
        return list(packed.split(self.encoder.token_counts([m.shape[1] for m in mels]), dim=0))

    def _record_batch(self, stats: BatchStats) -> None:
        self.metrics.get("omnimesh_encoder_latency_seconds").observe(stats.compute_seconds)
        self.metrics.get("omnimesh_encoder_items_per_batch").observe(stats.num_items)
