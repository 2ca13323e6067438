"""The talker's step core: continuous batching of talker frames across requests, audio out in chunks. EngineLoop
runs it (runtime/engine/step_core.py has the contract).

Each step: start rows whose first thinker token arrived (one padded prefill for all of them), step every ready row
together (the code predictor batched inside the step), decode every stream with a chunk ready in batched Code2Wav
calls, and finish rows whose audio is all out. Requests join and leave between steps; a row waiting for its next
thinker token sits out the step without holding anyone up.

The thread's host work is on every frame's path (the GPU idles from a frame's end to the next launch), so it is
kept per step rather than per row where it can be: one read-back of all the chunks' samples, and all of a step's
outputs returned together (the loop hands them to each event loop in one call). Code2Wav runs on a side stream
beside the next frames (`ChunkDecoder`): a chunk's samples go out on the first step that finds its decode done,
read back once that step's frame is on its way; the thread waits for a decode only when it has no frame to launch
or `speech.decodes_in_flight` (4) are in flight. With `speech.prioritize_frames` the thread launches on a
high-priority stream, so the frames keep the SMs and the decodes fill what they leave. With `speech.frames_ahead`
a frame is launched before the last one's codes are read, so the staging of a frame also leaves the GPU's path; a
row the last frame ends on the codec EOS drops its row of the new one.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from runtime.config import SpeechConfig
from runtime.engine.step_core import Abort, Add, CoreLoad, Output, StepCore, StepResult, StepStats
from runtime.errors import OmniError
from services.talker.chunk_decoder import ChunkDecoder
from services.talker.job import SpeechJob
from services.talker.model.code2wav_stream import StreamingCode2Wav
from services.talker.model.generate import RowStart, TalkerRunner
from services.talker.model.prompt import ASSISTANT_PREAMBLE
from services.talker.prefill_batch import prefill_batch
from services.talker.request import AudioOut, FinishedOut, SpeakInput

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MoreText:
    """Thinker ids for request `key`, in order."""

    key: int
    token_ids: list[int]


@dataclass(frozen=True)
class TextEnd:
    """The thinker has finished request `key`'s text."""

    key: int


class SpeechCore(StepCore):
    """Owns the TalkerRunner (its KV slots are the rows) and the Code2Wav streams. Requests are `SpeakInput`s;
    outputs are `AudioOut` chunks, then the final `FinishedOut` (or the error that ended the request)."""

    thread_name = "talker-engine"
    stage = "talker"

    def __init__(self, runner: TalkerRunner, speech: SpeechConfig, thinker_eos: frozenset[int]) -> None:
        self.runner = runner
        self.speech = speech
        self.thinker_eos = thinker_eos
        self._pending: dict[int, SpeechJob] = {}  # submitted, no row yet (insertion order: first come first served)
        self._running: dict[int, SpeechJob] = {}  # holding a row, or flushing its last audio
        self._outputs: list[Output] = []  # this step's, returned at its end
        self._chunks = ChunkDecoder(runner.model.code2wav, speech.decodes_in_flight)
        self.frame_stream: torch.cuda.Stream | None = None  # the engine thread's CUDA stream, once it has started

    def thread_started(self) -> None:
        """Grad mode and the current CUDA stream are per thread: set here, for every step. The runner warms up on
        this thread too, so its per-thread library state (and whatever else first calls pay) is set up before a
        request waits on it."""
        torch.set_grad_enabled(False)
        device = self.runner.model.code2wav.code_offset.device
        if device.type == "cuda" and self.speech.prioritize_frames:
            # one of the device's highest-priority streams: when Code2Wav decodes run beside the frames (on the
            # decoder's default-priority side stream) the GPU's block scheduler starts a frame's blocks before
            # theirs, and the decodes fill the SMs a small frame leaves idle
            stream = torch.cuda.Stream(device, priority=-(1 << 10))  # torch maps it to the highest the device has
            stream.wait_stream(torch.cuda.current_stream(device))  # the weights and buffers the service set up
            torch.cuda.set_stream(stream)
        if device.type == "cuda":
            self.frame_stream = torch.cuda.current_stream(device)
        self.runner.warm_up()

    def apply(self, command: object) -> None:
        if isinstance(command, Add):
            inp: SpeakInput = command.request
            stream = StreamingCode2Wav(self.runner.model.code2wav, self.speech.first_chunk_frames,
                                       self.speech.chunk_frames, self.speech.left_context_frames)
            self._pending[command.key] = SpeechJob(command.key, inp, stream)
            return
        if not isinstance(command, (Abort, MoreText, TextEnd)):
            raise TypeError(f"the talker engine takes Add, Abort, MoreText and TextEnd, not {command!r}")
        job = self._pending.get(command.key) or self._running.get(command.key)
        if job is None:
            return  # finished or cancelled already
        if isinstance(command, MoreText):
            job.add_text(command.token_ids)
        elif isinstance(command, TextEnd):
            job.end_text()
        else:
            self._drop(job)

    @property
    def has_work(self) -> bool:
        if self.runner.has_pending or self._chunks.busy:  # a launched frame's codes or chunk's samples to read
            return True
        if self.runner.kv.free_slots and any(j.can_start for j in self._pending.values()):
            return True
        return any(j.state is not None and (j.state.is_ready or j.is_done) for j in self._running.values())

    def step(self) -> StepResult:
        t0 = time.perf_counter()
        started = self._start_rows()
        settled = self.runner.has_pending  # a launched frame's codes, read in _step_rows if nothing else is
        rows = self._step_rows()
        # the decodes that are done, now that this step's frame is launched; a step that launched nothing waits
        # for the oldest instead of spinning
        collected = self._collect_audio(wait=not (started or rows or settled))
        decoded = self._decode_chunks()
        for job in [j for j in self._running.values() if j.is_done and not self._chunks.holds(j)]:
            del self._running[job.job_id]
            self._send(job, job.finished())
        outputs, self._outputs = self._outputs, []
        if not (started or rows or settled or collected or decoded):
            return StepResult(outputs, None)
        return StepResult(outputs, StepStats(time.perf_counter() - t0, rows, rows, 0, len(self._pending),
                                             len(self._running), None))

    def fail_all(self, error: BaseException) -> list[Output]:
        """Forgets every request (the runner's state goes with the engine); returns what the failed step made."""
        self._pending.clear()
        self._running.clear()
        outputs, self._outputs = self._outputs, []
        return outputs

    def load(self) -> CoreLoad:
        return CoreLoad(len(self._pending), len(self._running), None)

    def _start_rows(self) -> bool:
        """One prefill for the requests that can start now (first come first served, within `max_prefill_tokens`)."""
        jobs = self._startable()
        if not jobs:
            return False
        for job in jobs:
            del self._pending[job.job_id]
        t0 = time.perf_counter()
        results = self.runner.start_many([
            RowStart(job.inp.prompt, job.first_token, job.inp.sampling, job.inp.max_frames, job.inp.request_id,
                     self.thinker_eos)
            for job in jobs
        ])  # fmt: skip
        elapsed = time.perf_counter() - t0
        for job, result in zip(jobs, results):
            if isinstance(result, OmniError):  # a prompt the checks let through but the prefill refuses
                self._send(job, result)
                continue
            job.started(result)
            job.prefill_seconds = elapsed
            job.compute_seconds += elapsed
            self._running[job.job_id] = job
        return True

    def _startable(self) -> list[SpeechJob]:
        waiting = list(self._pending.values())
        # the prompt's ids bound its talker prefill (user turns only) plus the assistant preamble
        lengths = [len(j.inp.prompt.prompt_ids) + ASSISTANT_PREAMBLE if j.can_start else None for j in waiting]
        taken = prefill_batch(lengths, len(self.runner.kv.free_slots), self.speech.max_prefill_tokens)
        return [waiting[i] for i in taken]

    def _step_rows(self) -> int:
        """One frame for every ready row; returns the rows it ran."""
        ahead = self.runner.ahead
        if not ahead:
            self.runner.settle()  # the last frame's codes: rows that hit the codec EOS there end now
        ready = [j for j in self._running.values() if j.state is not None and j.state.is_ready]
        if not ready:
            self.runner.settle()
            return 0
        t0 = time.perf_counter()
        # a deferring runner reads the frame's new codes at the next settle, so decoding and sending audio below
        # overlap the GPU's frame instead of waiting for it
        frames = self.runner.step([j.state for j in ready])  # (B, G)
        # ahead: this frame was launched before the last one's codes were read; a row they end is not in it
        void = {id(s) for s in self.runner.settle(keep=1)} if ahead else set()
        for job, frame in zip(ready, frames.unbind(0)):
            if id(job.state) in void:
                self.runner.void_frame(job.state)
                continue
            job.add_frame(frame)
        elapsed = time.perf_counter() - t0
        for job in ready:
            job.compute_seconds += elapsed
        return len(ready)

    def _decode_chunks(self) -> bool:
        """Launch one batched Code2Wav pass over every stream with a chunk ready; finished rows flush their tail."""
        jobs, finals = [], []
        for job in self._running.values():  # every step and row: each job's state is read once
            final = job.state is not None and job.state.finished
            if job.stream.ready_frames(final):
                jobs.append(job)
                finals.append(final)
        if not jobs:
            return False
        self._chunks.launch(jobs, finals)
        return True

    def _collect_audio(self, wait: bool) -> bool:
        """Send the samples of every chunk decode that is done (with `wait`, the oldest one in any case)."""
        collected = self._chunks.collect(wait)
        for job, wav in collected:
            if wav is None or job.job_id not in self._running:  # no chunk of it ran, or cancelled meanwhile
                continue
            self._send(job, job.audio(wav))
            if job.chunks == 1 and log.isEnabledFor(logging.DEBUG):
                log.debug("speech %s: %s", job.inp.request_id, job.first_audio_timeline())
        return bool(collected)

    def _send(self, job: SpeechJob, item: AudioOut | FinishedOut | OmniError) -> None:
        self._outputs.append(Output(job.job_id, item, not isinstance(item, AudioOut)))

    def _drop(self, job: SpeechJob) -> None:
        """Cancel: forget the request and free its row and KV slot now."""
        self._pending.pop(job.job_id, None)
        self._running.pop(job.job_id, None)
        if job.state is not None and not job.state.finished:
            self.runner.release(job.state)
