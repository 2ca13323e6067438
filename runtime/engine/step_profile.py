"""A torch-profiler window over a few of a live engine's steps, for an operator asking where a running stage's step
time goes (a step can take twice as long in the mesh as in an isolated benchmark: only a profile from inside the
serving process shows which kernels or host ops differ). Off unless `OMNIMESH_PROFILE_STEPS` is set, and then once:
after its window the steps run unprofiled again. torch is imported only when a window opens, so the engine loop
(which does not import torch) stays light to import."""
from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PROFILE_STEPS_ENV = "OMNIMESH_PROFILE_STEPS"
PROFILE_DIR_ENV = "OMNIMESH_PROFILE_DIR"
_STEPS_FORM = re.compile(r"([0-9]+):([0-9]+)")


def step_profiler_from_env(stage: str) -> StepProfiler | None:
    """The profiler `OMNIMESH_PROFILE_STEPS="SKIP:COUNT"` asks for (COUNT steps after the first SKIP), writing to
    `OMNIMESH_PROFILE_DIR` (default: the working directory); None when unset or empty. A malformed value raises
    ValueError at start-up rather than leaving the operator waiting for a profile that never comes."""
    value = os.environ.get(PROFILE_STEPS_ENV, "")
    if not value:
        return None
    match = _STEPS_FORM.fullmatch(value.strip())
    if match is None or int(match[2]) < 1:
        raise ValueError(f"{PROFILE_STEPS_ENV}={value!r}: expected SKIP:COUNT, two non-negative integers with "
                         f"COUNT >= 1 (profile COUNT steps after skipping the first SKIP), e.g. 20:5")
    return StepProfiler(stage, int(match[1]), int(match[2]), Path(os.environ.get(PROFILE_DIR_ENV) or "."))


class StepProfiler:
    """Wrap each step in `step()`: steps `skip` .. `skip + count - 1` run under `torch.profiler.profile` (CPU, and
    CUDA where present); then `<out_dir>/<stage>-pid<pid>-steps.txt` (each step's wall time and the op tables) and
    `<stage>-pid<pid>-trace.json.gz` (a Chrome/Perfetto trace) are written on the engine thread, once.

    The window runs from the first profiled step's start to the last one's end, so the loop's work between those
    steps (delivery, commands) and every other thread's torch ops in that time are in it too: host contention from
    the rest of the process is part of what a live step pays. Step walls are host time with no device sync added
    (one would change the overlap being measured), and include the profiler's own per-op overhead."""

    def __init__(self, stage: str, skip: int, count: int, out_dir: Path) -> None:
        self.stage, self.skip, self.count, self.out_dir = stage, skip, count, out_dir
        self._entered = 0  # steps seen so far, profiled or not
        self._walls_ms: list[float] = []
        self._profile: Any = None  # the torch profiler while the window is open
        self._done = False

    def step(self) -> AbstractContextManager[None]:
        index = self._entered
        self._entered += 1
        if self._done or index < self.skip:
            return nullcontext()
        return self._profiled()

    @contextmanager
    def _profiled(self) -> Iterator[None]:
        if self._profile is None and not self._open():
            yield
            return
        import torch

        started = time.perf_counter()
        try:
            with torch.profiler.record_function(f"{self.stage} step"):  # marks each step in the trace and table
                yield
        except BaseException:
            self._walls_ms.append((time.perf_counter() - started) * 1e3)
            self._close()  # the loop dies with this step: write what the window holds
            raise
        self._walls_ms.append((time.perf_counter() - started) * 1e3)
        if len(self._walls_ms) == self.count:
            self._close()

    def _open(self) -> bool:
        """Starts the profiler (outside the first step's wall: its set-up is not the step's). A failure (another
        profiler already running in the process) is logged and ends profiling; it never fails the engine."""
        import torch
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        try:
            self._profile = torch.profiler.profile(activities=activities)
            self._profile.__enter__()
        except Exception:
            log.exception("%s: could not start the step profiler; the steps run unprofiled", self.stage)
            self._profile, self._done = None, True
            return False
        log.info("%s: profiling steps %d..%d", self.stage, self.skip, self.skip + self.count - 1)
        return True

    def _close(self) -> None:
        profile, self._profile, self._done = self._profile, None, True
        stem = self.out_dir.absolute() / f"{self.stage}-pid{os.getpid()}"  # the log names where, whatever the cwd
        text, trace = stem.with_name(stem.name + "-steps.txt"), stem.with_name(stem.name + "-trace.json.gz")
        if not _attempt(f"{self.stage}: stopping the step profiler", lambda: profile.__exit__(None, None, None)):
            return
        wrote = _attempt(f"{self.stage}: writing {text}", lambda: self._write_text(profile, text))
        traced = _attempt(f"{self.stage}: writing {trace}", lambda: profile.export_chrome_trace(str(trace)))
        if wrote:
            log.info("%s: step profile of %d steps (%.0f ms mean) written to %s%s", self.stage, len(self._walls_ms),
                     sum(self._walls_ms) / len(self._walls_ms), text, f", trace {trace}" if traced else "")

    def _write_text(self, profile: Any, path: Path) -> None:
        import torch

        averages = profile.key_averages()
        # Wide name columns: a kernel's name tells which GEMM or attention variant ran, and it is long.
        table = {"row_limit": 40, "max_name_column_width": 120, "max_shapes_column_width": 120}
        sections = [
            f"{self.stage} pid {os.getpid()}: steps {self.skip}..{self.skip + len(self._walls_ms) - 1} of the engine",
            "step wall ms: " + " ".join(f"{ms:.1f}" for ms in self._walls_ms),
            f"steps: {len(self._walls_ms)}",
        ]
        if torch.cuda.is_available():
            sections += ["", "by device time (total):", averages.table(sort_by="device_time_total", **table)]
        sections += ["", "by CPU self time:", averages.table(sort_by="self_cpu_time_total", **table)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(sections) + "\n")


def _attempt(what: str, action: Callable[[], object]) -> bool:
    """Runs `action`; a failure is logged, never raised: a diagnostic must not take the engine thread down."""
    try:
        action()
    except Exception:
        log.exception("%s failed", what)
        return False
    return True
