"""A phase's engine summary from two reads of a stage's step counters."""
from __future__ import annotations

import pytest

from bench.thinker.stage_counters import phase_summary


def test_phase_summary_divides_the_deltas() -> None:
    before = {"omnimesh_step_time_seconds_sum": 1.0, "omnimesh_step_time_seconds_count": 100.0,
              "omnimesh_batch_size_sum": 300.0, "omnimesh_batch_size_count": 100.0}
    after = {"omnimesh_step_time_seconds_sum": 1.5, "omnimesh_step_time_seconds_count": 200.0,
             "omnimesh_batch_size_sum": 700.0, "omnimesh_batch_size_count": 200.0}
    summary = phase_summary(before, after, seconds=2.0)
    assert summary == {"steps_per_s": 50.0, "step_ms_mean": pytest.approx(5.0), "batches_per_s": 50.0,
                       "rows_per_batch": 4.0}


def test_a_phase_without_steps_has_no_means() -> None:
    counters = {"omnimesh_step_time_seconds_sum": 1.0, "omnimesh_step_time_seconds_count": 10.0,
                "omnimesh_batch_size_sum": 3.0, "omnimesh_batch_size_count": 1.0}
    assert phase_summary(counters, counters, seconds=1.0) == {"steps_per_s": 0.0, "step_ms_mean": None,
                                                              "batches_per_s": 0.0, "rows_per_batch": None}
