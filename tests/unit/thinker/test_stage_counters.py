"""A phase's summary from two readings of a process: its engine's step counters and its CPU times."""
from __future__ import annotations

import os
import time

import pytest

from bench.thinker.proc_cpu import CpuTimes, ThreadTime
from bench.thinker.stage_counters import StageReading, measured_phase, phase_summary, read_counters, read_stage

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


def test_an_encoder_stage_gets_its_queue_and_forward_means_and_no_step_rates() -> None:
    before = {"omnimesh_queue_time_seconds_sum": 1.0, "omnimesh_queue_time_seconds_count": 10.0,
              "omnimesh_encoder_latency_seconds_sum": 0.5, "omnimesh_encoder_latency_seconds_count": 5.0,
              "omnimesh_encoder_items_per_batch_sum": 10.0, "omnimesh_encoder_items_per_batch_count": 5.0}
    after = {"omnimesh_queue_time_seconds_sum": 1.3, "omnimesh_queue_time_seconds_count": 20.0,
             "omnimesh_encoder_latency_seconds_sum": 0.6, "omnimesh_encoder_latency_seconds_count": 9.0,
             "omnimesh_encoder_items_per_batch_sum": 20.0, "omnimesh_encoder_items_per_batch_count": 9.0}
    summary = phase_summary(StageReading(before, None), StageReading(after, None), seconds=1.0)
    assert summary == {"queue_ms_mean": pytest.approx(30.0), "encode_ms_mean": pytest.approx(25.0),
                       "items_per_encode": pytest.approx(2.5)}
    # no request in the phase: the means are None, not a division by zero
    assert phase_summary(StageReading(after, None), StageReading(after, None), seconds=1.0) == {
        "queue_ms_mean": None, "encode_ms_mean": None, "items_per_encode": None}


def test_the_gateway_gets_its_first_token_mean_and_edge_seconds_per_request() -> None:
    before = {"omnimesh_time_to_first_token_seconds_sum": 1.0, "omnimesh_time_to_first_token_seconds_count": 10.0,
              "edge:gateway->audio": 0.5, "edge:audio->gateway": 0.2}
    after = {"omnimesh_time_to_first_token_seconds_sum": 3.0, "omnimesh_time_to_first_token_seconds_count": 50.0,
             "edge:gateway->audio": 0.9, "edge:audio->gateway": 0.6, "edge:gateway->thinker": 0.04}
    summary = phase_summary(StageReading(before, None), StageReading(after, None), seconds=1.0)
    assert summary["ttft_ms_mean"] == pytest.approx(50.0)
    assert summary["edge_ms_per_request"] == pytest.approx(
        {"audio->gateway": 10.0, "gateway->audio": 10.0, "gateway->thinker": 1.0})


def test_read_counters_keys_the_edge_seconds_by_edge() -> None:
    from prometheus_client import CollectorRegistry, Counter, start_http_server

    registry = CollectorRegistry()
    edge = Counter("omnimesh_edge_seconds", "edge seconds", ("from_stage", "to_stage"), registry=registry)
    edge.labels("gateway", "audio").inc(0.25)
    edge.labels("audio", "gateway").inc(0.5)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        counters = read_counters(server.server_address[1])
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert counters == {"edge:gateway->audio": 0.25, "edge:audio->gateway": 0.5}


def test_a_phase_without_steps_has_no_means_and_a_process_without_an_engine_only_cpu() -> None:
    idle = StageReading(STEPS_BEFORE, None)
    assert phase_summary(idle, idle, seconds=1.0) == {"steps_per_s": 0.0, "step_ms_mean": None,
                                                      "batches_per_s": 0.0, "rows_per_batch": None}
    relay = read_stage(os.getpid(), None)  # this process, read from /proc
    assert relay.steps is None and relay.cpu is not None and relay.cpu.main_thread_s > 0
    assert relay.cpu.process_s + 0.02 >= relay.cpu.main_thread_s  # read one after the other, in 10 ms ticks
    assert relay.cpu.threads[os.getpid()].seconds == relay.cpu.main_thread_s  # the main thread is the pid's task


def test_measured_phase_reads_before_and_after_its_block_and_summarizes_each_process() -> None:
    after = {"omnimesh_step_time_seconds_sum": 1.2, "omnimesh_step_time_seconds_count": 140.0}
    readings = iter([{"thinker": StageReading(STEPS_BEFORE, None)}, {"thinker": StageReading(after, None)}])
    with measured_phase(lambda: next(readings)) as phase:
        assert phase.stages == {}  # filled when the block ends
        time.sleep(0.02)
    assert 0.02 <= phase.seconds < 5.0
    assert phase.stages == {"thinker": phase_summary(StageReading(STEPS_BEFORE, None), StageReading(after, None),
                                                     phase.seconds)}
    assert phase.stages["thinker"]["step_ms_mean"] == pytest.approx(5.0)
