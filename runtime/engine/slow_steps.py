"""A warning for engine steps far slower than a step should be, so a latency spike at 3 a.m. names its cause in the
log: the step's rows, tokens and queue, not only a histogram bucket. Rate-limited: an overloaded engine whose every
step is slow writes one line per interval, with the count of the slow steps it did not write."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from runtime.engine.step_core import StepStats

log = logging.getLogger(__name__)


class SlowStepLog:
    def __init__(self, stage: str, threshold_s: float = 0.5, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stage = stage
        self.threshold_s = threshold_s
        self.every_s = every_s
        self._clock = clock
        self._last: float | None = None  # when the last warning went out
        self._unwritten = 0  # slow steps since then

    def __call__(self, stats: StepStats) -> bool:
        """Warns if `stats` is a slow step and no warning went out in the last `every_s`; True when it wrote."""
        if stats.seconds < self.threshold_s:
            return False
        now = self._clock()
        if self._last is not None and now - self._last < self.every_s:
            self._unwritten += 1
            return False
        more = f"; {self._unwritten} more slow steps since the last warning" if self._unwritten else ""
        kv = "" if stats.kv_usage_ratio is None else f", KV {stats.kv_usage_ratio * 100:.0f}% used"
        log.warning("%s: a step took %.0f ms (over %.0f ms): %d rows, %d tokens, %d running, %d waiting, %d preempted"
                    "%s%s", self.stage, stats.seconds * 1e3, self.threshold_s * 1e3, stats.num_rows, stats.num_tokens,
                    stats.num_running, stats.num_waiting, stats.num_preempted, kv, more)
        self._last, self._unwritten = now, 0
        return True
