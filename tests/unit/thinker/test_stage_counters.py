"""A phase's summary from two readings of a process: its engine's step counters and its CPU times."""
from __future__ import annotations

import os

import pytest

from bench.thinker.proc_cpu import CpuTimes, ThreadTime
from bench.thinker.stage_counters import StageReading, phase_summary, read_stage

STEPS_BEFORE = {"omnimesh_step_time_seconds_sum": 1.0, "omnimesh_step_time_seconds_count": 100.0,
                "omnimesh_batch_size_sum": 300.0, "omnimesh_batch_size_count": 100.0}


def test_phase_summary_divides_the_deltas() -> None:
    after = {"omnimesh_step_time_seconds_sum": 1.5, "omnimesh_step_time_seconds_count": 200.0,
             "omnimesh_batch_size_sum": 700.0, "omnimesh_batch_size_count": 200.0}
    threads_before = {1: ThreadTime("python3", 4.0), 2: ThreadTime("omp", 3.0), 3: ThreadTime("omp", 3.0)}
    # thread 3 ended, 4 started during the phase: a new thread counts from zero, an ended one drops out
    threads_after = {1: ThreadTime("python3", 5.0), 2: ThreadTime("omp", 4.0), 4: ThreadTime("omp", 0.5),
                     5: ThreadTime("talker-engine", 2.0)}
    summary = phase_summary(StageReading(STEPS_BEFORE, CpuTimes(10.0, 4.0, threads_before)),
                            StageReading(after, CpuTimes(13.0, 5.0, threads_after)), seconds=2.0)
    assert summary == {"cpu_process": 1.5, "cpu_event_loop": 0.5,
                       "cpu_threads": [["talker-engine", 1, 1.0], ["omp", 2, 0.75], ["python3", 1, 0.5]],
                       "steps_per_s": 50.0, "step_ms_mean": pytest.approx(5.0), "batches_per_s": 50.0,
                       "rows_per_batch": 4.0}


def test_a_phase_without_steps_has_no_means_and_a_process_without_an_engine_only_cpu() -> None:
    idle = StageReading(STEPS_BEFORE, None)
    assert phase_summary(idle, idle, seconds=1.0) == {"steps_per_s": 0.0, "step_ms_mean": None,
                                                      "batches_per_s": 0.0, "rows_per_batch": None}
    relay = read_stage(os.getpid(), None)  # this process, read from /proc
    assert relay.steps is None and relay.cpu is not None and relay.cpu.main_thread_s > 0
    assert relay.cpu.process_s + 0.02 >= relay.cpu.main_thread_s  # read one after the other, in 10 ms ticks
    assert relay.cpu.threads[os.getpid()].seconds == relay.cpu.main_thread_s  # the main thread is the pid's task
