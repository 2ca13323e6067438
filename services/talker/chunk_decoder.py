"""The talker engine's Code2Wav calls: launched on a side CUDA stream, their samples collected once they are done.

A chunk decode needs the codes of the frame launched just before it, so on one stream it would sit between that
frame and the next, and reading its samples back would hold the engine thread until both were done: the GPU
then idles while the thread prepares the next frame. Here the side stream waits for the frame on the GPU (not on
the host), the decode runs beside the next frames, and its samples reach the host through one pinned copy that the
engine picks up on a later iteration, once its event says the copy is done. Several launches may be in flight
(`max_in_flight`, the config's `speech.decodes_in_flight`): at 32 streams a batch of 25-frame chunks decodes for
~40 ms on the H200, eight frames' time, and an engine that waits for it on the next iteration leaves the frames
idle meanwhile. The side stream has the default priority: with `speech.prioritize_frames` the engine's frames run on
a higher one, so the GPU starts their blocks first and the decodes take the SMs they leave idle. The streaming
state (window caches, context) is only ever touched by the side stream, so decodes stay in order among themselves,
and flights are collected in launch order, so each stream's chunks go out in order.
"""
from __future__ import annotations

import time
from collections import deque
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

    @property
    def done(self) -> bool:
        return self.ready is None or self.ready.query()


class ChunkDecoder:
    """Batches of chunk decodes in flight, oldest first: `launch` one, `collect` those that are done."""

    def __init__(self, code2wav: Code2Wav, max_in_flight: int = 1) -> None:
        """max_in_flight: launches in flight at most (each holds its chunks' codes and pinned samples); with 1 every
        collect waits for the one launch, as the engine did before decodes could stay in flight."""
        self.code2wav = code2wav
        self.max_in_flight = max_in_flight
        device = code2wav.code_offset.device
        self._device = device
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._flights: deque[_InFlight] = deque()

    @property
    def busy(self) -> bool:
        return bool(self._flights)

    def holds(self, job: SpeechJob) -> bool:
        """Whether samples of `job` are being decoded or decoded but not collected yet."""
        return any(j is job for flight in self._flights for j in flight.jobs)

    def launch(self, jobs: Sequence[SpeechJob], finals: Sequence[bool]) -> None:
        """Decode every ready chunk of `jobs` (one batched Code2Wav pass per chunk shape); returns without waiting.
        With `max_in_flight` launches in flight already, `collect` must take one first."""
        if len(self._flights) >= self.max_in_flight:
            raise RuntimeError(f"ChunkDecoder.launch: {self.max_in_flight} launches in flight; collect first")
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
        self._flights.append(_InFlight(list(jobs), sizes, [len(parts) for parts in pieces], samples, ready, codes,
                                       time.perf_counter() - t0))

    def collect(self, wait: bool = False) -> list[tuple[SpeechJob, torch.Tensor | None]]:
        """Each job of the finished launches, oldest launch first, with its new host samples (None: no chunk of it
        ran). Waits for the oldest launch when `wait` is set (the engine has nothing else to do) or when `max_in_flight`
        are in flight (so the next launch has room); a launch still running stops the collection (order)."""
        out: list[tuple[SpeechJob, torch.Tensor | None]] = []
        must_wait = wait or len(self._flights) >= self.max_in_flight
        while self._flights and (self._flights[0].done or must_wait):
            flight = self._flights.popleft()
            t0 = time.perf_counter()
            if flight.ready is not None:
                flight.ready.synchronize()
            seconds = flight.launch_seconds + time.perf_counter() - t0
            for job, count, wav in zip(flight.jobs, flight.pieces, flight.samples.split(flight.sizes)):
                job.compute_seconds += seconds
                out.append((job, wav if count else None))
            must_wait = False
        return out

    @staticmethod
    def _flatten(pieces: list[list[torch.Tensor]]) -> torch.Tensor:
        flat = [p for parts in pieces for p in parts]
        if not flat:
            return torch.empty(0)
        return torch.cat(flat).float()
