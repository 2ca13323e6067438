"""The talker engine's Code2Wav calls: launched on a side CUDA stream, their samples collected one iteration later.

A chunk decode needs the codes of the frame launched just before it, so on one stream it would sit between that
frame and the next, and reading its samples back would hold the engine thread until both were done: the GPU
then idles while the thread prepares the next frame. Here the side stream waits for the frame on the GPU (not on
the host), the decode runs beside the next frame, and its samples reach the host through one pinned copy that the
engine collects after it has launched that next frame. The streaming state (window caches, context) is only ever
touched by the side stream, so decodes stay in order among themselves.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch

from runtime.transfer import to_host
from services.talker.job import SpeechJob
from services.talker.model.code2wav import Code2Wav
from services.talker.model.code2wav_stream import decode_streams


@dataclass
class _InFlight:
    jobs: list[SpeechJob]
    sizes: list[int]  # each job's new samples
    pieces: list[int]  # each job's decoded pieces (0: no chunk of it ran, so no message)
    samples: torch.Tensor  # (sum(sizes),) float32 on the host (pinned when it comes from a GPU)
    ready: torch.cuda.Event | None  # recorded after the copy to `samples` (None: computed on the CPU, ready now)
    # the frames' codes: tensors of the main stream's pool that the side stream reads, held until `ready`
    codes: list[list[torch.Tensor]]
    launch_seconds: float


class ChunkDecoder:
    """At most one batch of chunk decodes in flight; `launch` it, then `collect` it on the next iteration."""

    def __init__(self, code2wav: Code2Wav) -> None:
        self.code2wav = code2wav
        device = code2wav.code_offset.device
        self._device = device
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._flight: _InFlight | None = None

    @property
    def busy(self) -> bool:
        return self._flight is not None

    def holds(self, job: SpeechJob) -> bool:
        """Whether samples of `job` are decoded but not collected yet."""
        return self._flight is not None and any(j is job for j in self._flight.jobs)

    def launch(self, jobs: Sequence[SpeechJob], finals: Sequence[bool]) -> None:
        """Decode every ready chunk of `jobs` (one batched Code2Wav pass per chunk shape); returns without waiting."""
        if self._flight is not None:
            raise RuntimeError("ChunkDecoder.launch: the last launch was not collected")
        t0 = time.perf_counter()
        codes = [list(j.stream.pending) for j in jobs]
        streams = [j.stream for j in jobs]
        if self._stream is None:
            pieces = decode_streams(self.code2wav, streams, finals)
            samples, ready = self._flatten(pieces), None
        else:
            self._stream.wait_stream(torch.cuda.current_stream(self._device))  # the frame that made the codes
            with torch.cuda.stream(self._stream):
                pieces = decode_streams(self.code2wav, streams, finals)
                samples = to_host(self._flatten(pieces))
                ready = torch.cuda.Event()
                ready.record()
        sizes = [sum(p.shape[0] for p in parts) for parts in pieces]
        self._flight = _InFlight(list(jobs), sizes, [len(parts) for parts in pieces], samples, ready, codes,
                                 time.perf_counter() - t0)

    def collect(self) -> list[tuple[SpeechJob, torch.Tensor | None]]:
        """Each in-flight job with its new host samples (None: no chunk of it ran); waits for the decode."""
        flight, self._flight = self._flight, None
        if flight is None:
            return []
        t0 = time.perf_counter()
        if flight.ready is not None:
            flight.ready.synchronize()
        seconds = flight.launch_seconds + time.perf_counter() - t0
        out: list[tuple[SpeechJob, torch.Tensor | None]] = []
        for job, count, wav in zip(flight.jobs, flight.pieces, flight.samples.split(flight.sizes)):
            job.compute_seconds += seconds
            out.append((job, wav if count else None))
        return out

    @staticmethod
    def _flatten(pieces: list[list[torch.Tensor]]) -> torch.Tensor:
        flat = [p for parts in pieces for p in parts]
        if not flat:
            return torch.empty(0)
        return torch.cat(flat).float()
