"""The talker engine: continuous batching of talker steps across requests on its own thread, audio out in chunks.

Each iteration: start rows whose first thinker token arrived (one padded prefill for all of them), step every
ready row together (the code predictor batched inside the step), decode every stream with a chunk ready in batched
Code2Wav calls, and finish rows whose audio is all out. Requests join and leave between iterations; a row waiting
for its next thinker token sits out the step without holding anyone up.

The thread's host work is on every frame's path (the GPU idles from a frame's end to the next launch), so it is
kept per iteration rather than per row where it can be: one read-back of all the chunks' samples, one hand-off to
each event loop for all its streams' outputs (every `call_soon_threadsafe` wakes the loop, which then contends
for the GIL with this thread). Code2Wav runs on a side stream beside the next frames (`ChunkDecoder`): a chunk's
samples go out on the first iteration that finds its decode done, read back once that iteration's frame is on its
way; the thread waits for a decode only when it has no frame to launch or `speech.decodes_in_flight` (4) are in
flight. With `speech.prioritize_frames` the thread launches on a high-priority stream, so the frames keep the SMs
and the decodes fill what they leave. With `speech.frames_ahead` a frame is launched before the last one's codes
are read, so the staging of a frame also leaves the GPU's path; a row the last frame ends on the codec EOS drops its
row of the new one.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass

import torch

from runtime.config import SpeechConfig
from runtime.errors import OmniError, Unavailable
from runtime.heartbeat import Heartbeat
from runtime.metrics import Metrics
from runtime.thread_names import name_this_thread
from services.talker.chunk_decoder import ChunkDecoder
from services.talker.handle import SpeechHandle
from services.talker.job import Output, Sink, SpeechJob
from services.talker.model.code2wav_stream import StreamingCode2Wav
from services.talker.model.generate import RowStart, TalkerRunner
from services.talker.model.prompt import ASSISTANT_PREAMBLE
from services.talker.prefill_batch import prefill_batch
from services.talker.request import SpeakInput

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Add:
    job: SpeechJob


@dataclass(frozen=True)
class _Text:
    job_id: int
    token_ids: list[int]


@dataclass(frozen=True)
class _End:
    job_id: int


@dataclass(frozen=True)
class _Cancel:
    job_id: int


_Command = _Add | _Text | _End | _Cancel | None  # None stops the loop


class SpeechEngine:
    """Owns the TalkerRunner (its KV slots are the rows) and the Code2Wav streams; see the module docstring."""

    def __init__(self, runner: TalkerRunner, speech: SpeechConfig, thinker_eos: frozenset[int],
                 metrics: Metrics | None = None) -> None:
        self.runner = runner
        self.speech = speech
        self.thinker_eos = thinker_eos
        self._metrics = metrics
        self._ids = itertools.count()
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._pending: dict[int, SpeechJob] = {}  # submitted, no row yet (insertion order: first come first served)
        self._running: dict[int, SpeechJob] = {}  # holding a row, or flushing its last audio
        self._outbox: dict[asyncio.AbstractEventLoop, list[tuple[SpeechJob, Output]]] = {}  # sent at iteration end
        self._failure: BaseException | None = None
        self.heartbeat = Heartbeat()
        self._chunks = ChunkDecoder(runner.model.code2wav, speech.decodes_in_flight)
        self._thread = threading.Thread(target=self._loop, name="talker-engine", daemon=True)
        self._warmed = threading.Event()
        self._thread.start()
        self._warmed.wait()
        if self._failure is not None:
            raise RuntimeError("the talker engine failed its warm-up") from self._failure

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def close(self) -> None:
        self._commands.put(None)
        self._thread.join(timeout=10)

    def submit(self, inp: SpeakInput) -> SpeechHandle:
        """Queues a request; feed it text through the handle and read its audio from it; close it to cancel."""
        handle = SpeechHandle(self, next(self._ids))
        if self._failure is not None:
            handle.deliver(Unavailable(f"the talker engine has failed: {self._failure!r}", stage="talker"))
            return handle
        sink = Sink(asyncio.get_running_loop(), handle.deliver)
        code2wav = self.runner.model.code2wav
        stream = StreamingCode2Wav(code2wav, self.speech.first_chunk_frames, self.speech.chunk_frames,
                                   self.speech.left_context_frames)
        self._commands.put(_Add(SpeechJob(handle.job_id, inp, sink, stream)))
        if self._failure is not None:  # died after the check above: its last drain may have missed this job
            handle.deliver(Unavailable(f"the talker engine has failed: {self._failure!r}", stage="talker"))
        return handle

    def push_text(self, job_id: int, token_ids: list[int]) -> None:
        self._commands.put(_Text(job_id, list(token_ids)))

    def end_text(self, job_id: int) -> None:
        self._commands.put(_End(job_id))

    def cancel(self, job_id: int) -> None:
        self._commands.put(_Cancel(job_id))

    # --- the engine thread -------------------------------------------------------------------------------------

    def _loop(self) -> None:
        name_this_thread("talker-engine")
        with self._frame_stream():
            self._run()

    def _frame_stream(self) -> contextlib.AbstractContextManager:
        """The thread's CUDA stream: with `speech.prioritize_frames`, one of the device's highest priority, so that
        when Code2Wav decodes run beside the frames (on the decoder's default-priority side stream) the GPU's block
        scheduler starts a frame's blocks before theirs and the decodes fill the SMs a small frame leaves idle."""
        device = self.runner.model.code2wav.code_offset.device
        if device.type != "cuda" or not self.speech.prioritize_frames:
            return contextlib.nullcontext()
        stream = torch.cuda.Stream(device, priority=-(1 << 10))  # torch maps it to the highest the device has
        stream.wait_stream(torch.cuda.current_stream(device))  # the weights and buffers the service set up
        return torch.cuda.stream(stream)

    def _run(self) -> None:
        try:
            # on this thread, so its per-thread library state (and whatever else first calls pay) is set up before a
            # request waits on it
            self.runner.warm_up()
        except BaseException as e:
            self._failure = e  # __init__ raises it
            return
        finally:
            self._warmed.set()
        try:
            while self._drain_commands(block=not self._has_work()):
                t0 = time.perf_counter()
                with torch.no_grad(), self.heartbeat.beat():
                    worked = self._iterate()
                if worked and self._metrics is not None:
                    self._metrics.get("omnimesh_step_time_seconds").observe(time.perf_counter() - t0)
                self._update_gauges()
        except BaseException as e:  # a dead engine must fail every open stream, not hang it
            log.exception("talker engine loop died")
            self._failure = e
            self._fail_all(Unavailable(f"the talker engine has failed: {e!r}", stage="talker"))

    def _has_work(self) -> bool:
        if self.runner.has_pending or self._chunks.busy:  # a launched frame's codes or chunk's samples to read
            return True
        if self.runner.kv.free_slots and any(j.can_start for j in self._pending.values()):
            return True
        return any(j.state is not None and (j.state.is_ready or j.is_done) for j in self._running.values())

    def _drain_commands(self, block: bool) -> bool:
        """Applies queued commands; waits for one when idle. False when asked to stop."""
        while True:
            try:
                cmd = self._commands.get(block=block)
            except queue.Empty:
                return True
            block = False
            if cmd is None:
                return False
            if isinstance(cmd, _Add):
                self._pending[cmd.job.job_id] = cmd.job
                continue
            job = self._pending.get(cmd.job_id) or self._running.get(cmd.job_id)
            if job is None:
                continue  # finished or cancelled already
            if isinstance(cmd, _Text):
                job.add_text(cmd.token_ids)
            elif isinstance(cmd, _End):
                job.end_text()
            else:
                self._drop(job)
            self._update_gauges()

    def _iterate(self) -> bool:
        started = self._start_rows()
        stepped = self._step_rows()
        # the decodes that are done, now that this iteration's frame is launched; an iteration that launched
        # nothing waits for the oldest instead of spinning
        collected = self._collect_audio(wait=not (started or stepped))
        decoded = self._decode_chunks()
        for job in [j for j in self._running.values() if j.is_done and not self._chunks.holds(j)]:
            del self._running[job.job_id]
            self._send(job, job.finished())
        self._flush()
        return started or stepped or collected or decoded

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
            if self._metrics is not None:
                self._metrics.get("omnimesh_queue_time_seconds").observe(job.queue_seconds)
        return True

    def _startable(self) -> list[SpeechJob]:
        waiting = list(self._pending.values())
        # the prompt's ids bound its talker prefill (user turns only) plus the assistant preamble
        lengths = [len(j.inp.prompt.prompt_ids) + ASSISTANT_PREAMBLE if j.can_start else None for j in waiting]
        taken = prefill_batch(lengths, len(self.runner.kv.free_slots), self.speech.max_prefill_tokens)
        return [waiting[i] for i in taken]

    def _step_rows(self) -> bool:
        ahead = self.speech.frames_ahead and self.runner.frames is not None
        settled = self.runner.has_pending
        if not ahead:
            self.runner.settle()  # the last frame's codes: rows that hit the codec EOS there end now
        ready = [j for j in self._running.values() if j.state is not None and j.state.is_ready]
        if not ready:
            self.runner.settle()
            return settled
        t0 = time.perf_counter()
        # deferred: the frame's new codes are read at the next settle, so decoding and sending audio below
        # overlap the GPU's frame instead of waiting for it
        frames = self.runner.step([j.state for j in ready], defer=True, ahead=ahead)  # (B, G)
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
        if self._metrics is not None:
            self._metrics.get("omnimesh_batch_size").observe(len(ready))
        return True

    def _decode_chunks(self) -> bool:
        """Launch one batched Code2Wav pass over every stream with a chunk ready; finished rows flush their tail."""
        jobs, finals = [], []
        for job in self._running.values():  # every iteration and row: each job's state is read once
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

    def _send(self, job: SpeechJob, item: Output) -> None:
        """Queues `item` for the job's stream; `_flush` hands it over at the end of the iteration."""
        self._outbox.setdefault(job.sink.loop, []).append((job, item))

    def _flush(self) -> None:
        """One `call_soon_threadsafe` per event loop for everything this iteration produced, in order."""
        outbox, self._outbox = self._outbox, {}
        for loop, items in outbox.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the loop is gone (shutdown): free the rows of its streams
                for job in dict.fromkeys(job for job, _ in items):
                    log.warning("dropping speech request %s: its stream can no longer be reached", job.inp.request_id)
                    self._drop(job)

    def _drop(self, job: SpeechJob) -> None:
        """Cancel: forget the request and free its row and KV slot now."""
        self._pending.pop(job.job_id, None)
        self._running.pop(job.job_id, None)
        if job.state is not None and not job.state.finished:
            self.runner.release(job.state)

    def _update_gauges(self) -> None:
        if self._metrics is not None:
            self._metrics.get("omnimesh_requests_running").set(len(self._running))
            self._metrics.get("omnimesh_queue_depth").set(len(self._pending))

    def _fail_all(self, err: OmniError) -> None:
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
            if isinstance(cmd, _Add):
                self._pending[cmd.job.job_id] = cmd.job
        for job in [*self._pending.values(), *self._running.values()]:
            self._send(job, err)
        self._pending.clear()
        self._running.clear()
        self._flush()  # after any outputs the failed iteration had queued
        self._update_gauges()


def _deliver(items: list[tuple[SpeechJob, Output]]) -> None:
    """On the event loop: each output to its request's handle."""
    for job, item in items:
        job.sink.deliver(item)


__all__ = ["SpeechEngine", "Sink"]
