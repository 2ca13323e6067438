"""Phase timers for the talker engine thread: each of the engine's, runner's and streams' steps wrapped in a timer
that charges its time, less the phases inside it, to its phase; optionally a count of torch calls and a cProfile."""
from __future__ import annotations

import cProfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from torch.overrides import TorchFunctionMode

from runtime.engine.engine_loop import EngineLoop
from services.talker import chunk_decoder as chunk_decoder_module
from services.talker.job import SpeechJob
from services.talker.model import code2wav_stream
from services.talker.model.generate import TalkerRunner
from services.talker.speech_core import SpeechCore


class OpCounter(TorchFunctionMode):
    """Counts torch calls (functions and tensor methods, not attribute reads): on the GPU each is a launch or a
    host-side op, and each gives up the GIL, which the asyncio thread may then hold for a while."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_name: dict[str, int] = defaultdict(int)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = getattr(func, "__name__", str(func))
        if name != "__get__":
            self.count += 1
            self.by_name[name] += 1
        return func(*args, **(kwargs or {}))


class Phases:
    """Exclusive time per phase on `clock` (time.thread_time: the thread's CPU; time.perf_counter: wall, waits
    included); `reset` starts a new measurement."""

    def __init__(self, clock: Callable[[], float], count_ops: bool = False, profile: bool = False) -> None:
        self.clock = clock
        self.ops = OpCounter() if count_ops else None
        self.profile = cProfile.Profile(time.thread_time) if profile else None
        self._stack: list[list[Any]] = []  # [name, start, time of the phases inside]
        self.idle = threading.Event()  # set while the engine waits for a command, having no work: a run is over
        self.reset()

    def reset(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        if self.ops is not None:
            self.ops.count = 0
            self.ops.by_name.clear()

    @property
    def op_count(self) -> int:
        return self.ops.count if self.ops is not None else 0

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self._stack:  # the outermost phase: the profile and the op count run inside phases only
                if self.profile is not None:
                    self.profile.enable()
                if self.ops is not None:
                    self.ops.__enter__()
            self._stack.append([name, self.clock(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                _, start, inner = self._stack.pop()
                total = self.clock() - start
                self.seconds[name] += total - inner
                self.calls[name] += 1
                if self._stack:
                    self._stack[-1][2] += total
                else:
                    if self.ops is not None:
                        self.ops.__exit__(None, None, None)
                    if self.profile is not None:
                        self.profile.disable()
        return timed


Restore = list[tuple[object, str, object]]


def instrument(runner: TalkerRunner, phases: Phases) -> Restore:
    """Wraps the core's, runner's and streams' steps in phase timers; returns what `undo` puts back.

    Every engine iteration is one `iterate_other` call (SpeechCore.step): its count is the number of iterations."""
    assert runner.frames is not None
    patches: list[tuple[object, str, str]] = [
        (SpeechCore, "step", "iterate_other"), (EngineLoop, "_deliver", "send"),
        (SpeechCore, "_start_rows", "start_rows"), (SpeechCore, "_step_rows", "step_rows_engine"),
        (SpeechCore, "_decode_chunks", "decode_launch"), (SpeechCore, "_collect_audio", "audio_collect"),
        (SpeechCore, "_send", "send"),
        (SpeechJob, "audio", "audio_chunk"), (SpeechJob, "finished", "finish"),
        (runner, "settle", "settle"), (runner, "step", "frame_step"), (runner, "_draw", "noise_draws"),
        (runner, "_noise", "noise_stack"), (runner.frames, "run", "frame_load"),
    ]  # fmt: skip
    # the chunk decoder's module imported decode_streams by name
    restore: Restore = [(chunk_decoder_module, "decode_streams", chunk_decoder_module.decode_streams)]
    chunk_decoder_module.decode_streams = phases.wrap("decode_streams", code2wav_stream.decode_streams)
    for owner, attr, name in patches:
        own = getattr(owner, "__dict__", {})
        restore.append((owner, attr, own[attr] if attr in own else None))  # None: an instance's, from its class
        setattr(owner, attr, phases.wrap(name, getattr(owner, attr)))
    has_work = SpeechCore.__dict__["has_work"]
    restore.append((SpeechCore, "has_work", has_work))
    SpeechCore.has_work = property(phases.wrap("loop_other", has_work.fget))  # type: ignore[method-assign]
    drain = EngineLoop.__dict__["_drain"]
    timed_drain = phases.wrap("commands", drain)

    def drain_commands(loop: EngineLoop, block: bool) -> int:
        if not block:
            return timed_drain(loop, block)
        phases.idle.set()  # waiting, not working: untimed (on the wall clock it would be the idle time)
        try:
            return drain(loop, block)
        finally:
            phases.idle.clear()

    restore.append((EngineLoop, "_drain", drain))
    EngineLoop._drain = drain_commands  # type: ignore[method-assign]
    return restore


def undo(restore: Restore) -> None:
    for owner, attr, original in reversed(restore):
        if original is None:
            delattr(owner, attr)
        else:
            setattr(owner, attr, original)
