"""Stand-ins for the talker's GPU work on CPU: the frame, the prefill and the Code2Wav chunk cost no host time and
take a fixed GIL-free time on a simulated device queue instead, so what the engine thread spends is its own host
work (the per-row Python, the small torch calls that would be launches on the GPU, the stream bookkeeping).

The queue mimics one CUDA stream: a launch returns at once and the work finishes `seconds` after the previous work
did (or after the launch, if the device was idle); the points where the host waits on the GPU (the frame's codes
in `settle`, a prefill's first codes) sleep until then. Code2Wav runs on a second queue, the ChunkDecoder's side
stream: each decode starts once the frames launched before it are done, and the engine's collect waits for its
event (`paced_decoder`). The two queues do not slow each other down, as a real GPU's shared SMs would: decodes in
flight beside frames are modelled at their best.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from services.talker.chunk_decoder import ChunkDecoder
from services.talker.job import SpeechJob
from services.talker.model.code2wav import Code2Wav, StreamStep
from services.talker.model.frame_step import FrameInputs, FrameOutputs, FrameStep, Mode
from services.talker.model.generate import TalkerRunner
from services.talker.model.load import TalkerModel
from services.talker.model.state import TalkerState

# H200 timings (bench/talker/NOTES.md): frame graph ms at 1 / 8 / 32 rows, prefill graph ms, Code2Wav graph ms
FRAME_MS = {1: 4.33, 8: 4.77, 32: 5.28}  # results/2026-11-30-talker-h200-skinny-pick.json
PREFILL_MS = {1: 7.8, 8: 13.7, 32: 36.0}
CODE2WAV_MS = {1: 3.3, 8: 12.5, 32: 43.6}  # a 25-frame chunk per batch size (4-frame first chunks: ~2.6 at 1)


def interpolate(table: dict[int, float], rows: int) -> float:
    """Piecewise-linear in the row count between the measured points, flat outside them."""
    points = sorted(table.items())
    if rows <= points[0][0]:
        return points[0][1]
    for (r0, v0), (r1, v1) in zip(points, points[1:]):
        if rows <= r1:
            return v0 + (v1 - v0) * (rows - r0) / (r1 - r0)
    return points[-1][1]


class DeviceQueue:
    """One simulated in-order stream: when launched work finishes, and GIL-free waits for it."""

    def __init__(self) -> None:
        self.idle_at = 0.0
        self.busy_s = 0.0  # device time launched in all

    def launch(self, seconds: float, after: float = 0.0) -> float:
        """Queue `seconds` of work that starts no earlier than `after` (another queue's work it waits for); returns
        when it will be done (perf_counter time)."""
        self.idle_at = max(time.perf_counter(), self.idle_at, after) + seconds
        self.busy_s += seconds
        return self.idle_at

    @staticmethod
    def wait(until: float) -> None:
        left = until - time.perf_counter()
        if left > 0:
            time.sleep(left)  # releases the GIL, as a CUDA synchronize does

    def drain(self) -> None:
        self.wait(self.idle_at)


class PacedFrame:
    """Replaces the runner's FrameStep: the frame's outputs (ordinary codes, never the codec EOS, so each row runs
    to its max_frames) after a launch of `frame_ms(rows)` on the queue; `done` holds when each launched frame whose
    codes are unread finishes, oldest first."""

    def __init__(self, step: FrameStep, queue: DeviceQueue, frame_s: float) -> None:
        self.model, self.kv = step.model, step.kv  # what FrameGraphs reads off its step
        self.queue, self.frame_s = queue, frame_s
        self.done: deque[float] = deque()
        self._outputs: dict[int, FrameOutputs] = {}

    def __call__(self, inp: FrameInputs, mode: Mode) -> FrameOutputs:
        rows = inp.slots.shape[0]
        self.done.append(self.queue.launch(self.frame_s))
        out = self._outputs.get(rows)
        if out is None:
            cfg = self.model.cfg
            codes = torch.arange(rows * cfg.num_code_groups).view(rows, cfg.num_code_groups) % 1000 + 1
            out = self._outputs[rows] = FrameOutputs(codes, torch.zeros(rows, cfg.lm.hidden_size),
                                                     torch.full((rows,), 7, dtype=torch.long))
        return out


class PacedPrefill:
    """Replaces PrefillGraphs.run: zero hidden states (every row's first code is then an ordinary one) after the
    prefill's device time; it waits, as the prefill's first codes are read back right after it."""

    def __init__(self, queue: DeviceQueue, prefill_ms: dict[int, float], hidden: int) -> None:
        self.queue, self.prefill_ms, self.hidden = queue, prefill_ms, hidden

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        self.queue.wait(self.queue.launch(interpolate(self.prefill_ms, x.shape[0]) / 1e3))
        return torch.zeros(*x.shape[:2], self.hidden)


class PacedCode2Wav:
    """Replaces Code2Wav.stream_step (the graphs' eager body): right-shaped outputs (silence), the chunk's device time
    queued on `side` behind the frames launched on `main` so far (the side stream's wait for them)."""

    def __init__(self, model: Code2Wav, main: DeviceQueue, side: DeviceQueue, chunk_ms: dict[int, float],
                 chunk_frames: int) -> None:
        self.model, self.main, self.side = model, main, side
        self.chunk_ms, self.chunk_frames = chunk_ms, chunk_frames
        self._outputs: dict[tuple[int, ...], StreamStep] = {}  # per call shape: made once, so they cost no host time

    def __call__(self, codes: torch.Tensor, past: torch.Tensor, past_valid: torch.Tensor,
                 context: torch.Tensor | None) -> StreamStep:  # fmt: skip
        rows, _, frames = codes.shape
        total = frames + (0 if context is None else context.shape[1])
        # the table holds full chunks; a first (short) chunk costs less, though not in proportion (launch-bound)
        seconds = interpolate(self.chunk_ms, rows) / 1e3 * (0.3 + 0.7 * min(frames / self.chunk_frames, 1.0))
        self.side.launch(seconds, after=self.main.idle_at)
        out = self._outputs.get((rows, total, *past.shape))
        if out is None:
            out = self._outputs[(rows, total, *past.shape)] = StreamStep(
                torch.zeros(rows, self.model.output_length(total)), torch.zeros_like(past),
                torch.zeros(rows, total, self.model.cfg.hidden_size))
        return out


@dataclass
class PacedTalker:
    """A TalkerRunner whose GPU work is paced (see the module docstring) and its device queue."""

    runner: TalkerRunner
    queue: DeviceQueue
    side: DeviceQueue  # Code2Wav's
    frame: PacedFrame


class PacedEvent:
    """A CUDA event's two calls for work that ends at `done_at` on a simulated queue."""

    def __init__(self, done_at: float) -> None:
        self.done_at = done_at

    def query(self) -> bool:
        return time.perf_counter() >= self.done_at

    def synchronize(self) -> None:
        DeviceQueue.wait(self.done_at)


def paced_decoder(decoder: ChunkDecoder, side: DeviceQueue) -> None:
    """Gives each of the engine's ChunkDecoder launches (computed at once on the CPU) the event of its decode on the
    side queue, so its collect finds it running or waits for it as on the GPU."""
    launch = decoder.launch

    def launch_paced(jobs: Sequence[SpeechJob], finals: Sequence[bool]) -> None:
        launch(jobs, finals)
        decoder._flights[-1].ready = PacedEvent(side.idle_at)  # type: ignore[assignment]

    decoder.launch = launch_paced  # type: ignore[method-assign]


def paced_runner(model: TalkerModel, rows: int, max_frames: int, prompt_tokens: int, chunk_frames: int,
                 frame_ms: float | None = None, ahead: bool = False) -> PacedTalker:  # fmt: skip
    """The fast-path runner (FrameGraphs / PrefillGraphs buffers, Code2Wav graph bookkeeping without capture) on
    `model`, with its frame, prefill and Code2Wav forwards replaced by paced stand-ins."""
    queue = DeviceQueue()
    capacity = prompt_tokens + 9 + max_frames + 1
    runner = TalkerRunner(model, rows, capacity, fast=True, prefill_tokens=4096, defer=True, ahead=ahead)
    assert runner.frames is not None and runner.prefills is not None
    seconds = (frame_ms if frame_ms is not None else interpolate(FRAME_MS, rows)) / 1e3
    frame = PacedFrame(runner.frames.step, queue, seconds)
    runner.frames.step = frame  # type: ignore[assignment]
    settle = runner.settle

    def settle_after_frame(keep: int = 0) -> list[TalkerState]:  # where the GPU runner waits for frames' codes
        while len(frame.done) > keep:
            queue.wait(frame.done.popleft())
        return settle(keep)

    runner.settle = settle_after_frame  # type: ignore[method-assign]
    runner.prefills.run = PacedPrefill(queue, PREFILL_MS, model.cfg.lm.hidden_size)  # type: ignore[method-assign]
    model.code2wav.enable_cuda_graphs(rows, capture=False)  # the production call shapes and copies, run eagerly
    side = DeviceQueue()
    model.code2wav.stream_step = PacedCode2Wav(model.code2wav, queue, side, CODE2WAV_MS, chunk_frames)
    return PacedTalker(runner, queue, side, frame)
