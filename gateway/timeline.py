"""Where one public call's time went, as the gateway saw it, for the slow-request log and the `omnimesh-timing`
trailer a client (or the benchmark) reads: the call's phases in the order they ended (the header checks, media
decoding, the prompt, the encoders, the thinker's first token, the rest) and the stages' own queue and compute
seconds from their final messages.

The servicer opens one timeline per call in a context variable and the code along the request's path ends the phases
it finishes, so no signature carries it. A phase ended twice (a long clip's windows) keeps its first end, and a
stage's first report is kept: the record describes the way to the first answer. A streamed transcription opens a new
one when its audio ends, so its record is the final transcript's, timed from there.

The trailer's syntax and names: omnimesh/timing.py (the client's side)."""
from __future__ import annotations

import time
from contextvars import ContextVar

from omnimesh.timing import format_timing

# In the order a request meets them; `first_token` ends at the thinker's first tokens reaching the gateway (held back
# or not), `rest` at the call's last event. A spoken answer also ends `first_audio` (its first audio from the
# talker), after `first_token` as a rule.
PHASES = ("admit", "decode", "prompt", "encode", "first_token", "rest")

_current: ContextVar[Timeline | None] = ContextVar("omnimesh_timeline", default=None)


class Timeline:
    def __init__(self, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.ends: dict[str, float] = {}  # phase -> when it ended (monotonic), in the order they ended
        self.stages: dict[str, float] = {}  # "<stage>.queue" / "<stage>.compute" -> seconds, as the stage reported

    def end_phase(self, name: str) -> None:
        self.ends.setdefault(name, time.monotonic())

    def phases(self) -> dict[str, float]:
        """Seconds each phase took: from the end of the one before it (or the call's start) to its own."""
        out, last = {}, self.start
        for name, end in self.ends.items():
            out[name], last = end - last, end
        return out

    def stage_timings(self, stage: str, queue_s: float, compute_s: float) -> None:
        self.stages.setdefault(f"{stage}.queue", queue_s)
        self.stages.setdefault(f"{stage}.compute", compute_s)

    def first_token_s(self) -> float | None:
        """Seconds from the call's start to the thinker's first tokens; None before they came."""
        end = self.ends.get("first_token")
        return None if end is None else end - self.start

    def trailer(self) -> str:
        items = [*self.phases().items(), *self.stages.items(), ("total", time.monotonic() - self.start)]
        return format_timing((name, seconds * 1e3) for name, seconds in items)


def open_timeline(start: float | None = None) -> None:
    """A new timeline for the call running in this context (each gRPC call runs in its own task), in place of any
    it had."""
    _current.set(Timeline(start))


def current_timeline() -> Timeline | None:
    return _current.get()


def end_phase(name: str) -> None:
    """Ends `name` on this call's timeline; nothing outside a call (tests driving the service directly)."""
    if (timeline := _current.get()) is not None:
        timeline.end_phase(name)


def stage_timings(stage: str, queue_s: float, compute_s: float) -> None:
    if (timeline := _current.get()) is not None:
        timeline.stage_timings(stage, queue_s, compute_s)
