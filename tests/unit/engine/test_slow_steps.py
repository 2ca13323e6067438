"""Slow engine steps are written to the log with what they carried, at most once an interval."""
from __future__ import annotations

import logging

import pytest

from runtime.engine.engine import StepStats
from runtime.engine.slow_steps import SlowStepLog


def stats(seconds: float) -> StepStats:
    return StepStats(seconds=seconds, num_rows=8, num_tokens=1032, num_preempted=0, num_waiting=3, num_running=8,
                     kv_usage_ratio=0.25)


def test_a_slow_step_is_warned_about_once_an_interval_with_the_count_it_skipped(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    slow = SlowStepLog("thinker", threshold_s=0.5, every_s=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="runtime.engine.slow_steps"):
        assert slow(stats(0.49)) is False  # under the threshold: nothing
        assert slow(stats(0.85)) is True
        now[0] += 10.0
        assert slow(stats(0.9)) is False and slow(stats(1.2)) is False  # within the interval: counted
        now[0] += 25.0
        assert slow(stats(0.6)) is True
    first, second = (r.getMessage() for r in caplog.records)
    assert first == ("thinker: a step took 850 ms (over 500 ms): 8 rows, 1032 tokens, 8 running, 3 waiting, "
                     "0 preempted, KV 25% used")
    assert second.startswith("thinker: a step took 600 ms") and second.endswith("; 2 more slow steps since the last "
                                                                               "warning")
