"""What each process of a mesh did over a measured phase: its engine's step histograms and its requests' queue and
encoder histograms (from its /metrics), and the CPU its process, its asyncio thread and each of its threads used
(from /proc).

A mesh benchmark reads both when its phase starts and when it stops; the differences say how many engine steps ran,
how long one took on average and how many rows it carried (the talker counts an iteration as a step and a frame as
a batch), how long a request waited for its first batch and how long an encoder forward took with how many items,
and how busy each process's event loop was: a loop near one core is a relay that holds the mesh back. Together they
say which stage a request's time to first token went to.
"""
from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from bench.thinker.proc_cpu import CpuTimes, busiest_threads, cpu_times

STEP_SERIES = ("omnimesh_step_time_seconds", "omnimesh_batch_size")
# per request (queue) and per encoder forward: summarized as the phase's mean, in ms or items
MEAN_SERIES = {"queue_ms_mean": ("omnimesh_queue_time_seconds", 1e3),
               "encode_ms_mean": ("omnimesh_encoder_latency_seconds", 1e3),
               "items_per_encode": ("omnimesh_encoder_items_per_batch", 1.0),
               "ttft_ms_mean": ("omnimesh_time_to_first_token_seconds", 1e3)}  # the gateway's, from its arrival
READ_SERIES = STEP_SERIES + tuple(name for name, _ in MEAN_SERIES.values())
# the gateway's seconds moving payloads on each stage edge, per label pair: summarized per request it answered
EDGE_SERIES = "omnimesh_edge_seconds"
EDGE_KEY = "edge:{from_stage}->{to_stage}"


class StageReading(NamedTuple):
    steps: dict[str, float] | None  # read_counters' (None: the process has no engine)
    cpu: CpuTimes | None  # None: no /proc here


def read_counters(metrics_port: int, timeout_s: float = 5.0) -> dict[str, float]:
    """The `_sum` and `_count` of the stage's step, queue, encoder and first-token histograms (summed over their
    labels), and the gateway's edge seconds by edge (`EDGE_KEY`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in READ_SERIES:
            for sample in family.samples:
                if sample.name.endswith(("_sum", "_count")):
                    out[sample.name] = out.get(sample.name, 0.0) + sample.value
        elif family.name == EDGE_SERIES:
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = EDGE_KEY.format(**sample.labels)
                    out[key] = out.get(key, 0.0) + sample.value
    return out


def read_stage(pid: int, metrics_port: int | None) -> StageReading:
    try:
        cpu = cpu_times(pid)
    except OSError:
        cpu = None
    return StageReading(read_counters(metrics_port) if metrics_port else None, cpu)


def phase_summary(before: StageReading, after: StageReading, seconds: float) -> dict[str, Any]:
    """Per second of the phase: engine steps and batches, with the mean step time and rows a batch (stages that
    count steps); the mean queue time, encoder forward and first token (stages that have them), and the gateway's
    edge seconds per request it answered; CPU seconds of the process (all threads), of its asyncio thread and of its
    busiest thread names (name, threads, cores)."""
    out: dict[str, Any] = {}
    if before.cpu is not None and after.cpu is not None:
        used = after.cpu - before.cpu
        out |= {"cpu_process": used.process_s / seconds, "cpu_event_loop": used.main_thread_s / seconds,
                "cpu_threads": [[name, count, cores] for name, count, cores in busiest_threads(used, seconds)]}
    if before.steps is not None and after.steps is not None:
        delta = {name: after.steps.get(name, 0.0) - before.steps.get(name, 0.0) for name in after.steps}
        if "omnimesh_step_time_seconds_count" in delta:
            steps = delta["omnimesh_step_time_seconds_count"]
            batches = delta.get("omnimesh_batch_size_count", 0.0)
            out |= {"steps_per_s": steps / seconds,
                    "step_ms_mean": delta["omnimesh_step_time_seconds_sum"] / steps * 1e3 if steps else None,
                    "batches_per_s": batches / seconds,
                    "rows_per_batch": delta["omnimesh_batch_size_sum"] / batches if batches else None}
        for key, (series, scale) in MEAN_SERIES.items():
            count = delta.get(series + "_count")
            if count is not None:
                out[key] = delta[series + "_sum"] / count * scale if count else None
        answered = delta.get("omnimesh_time_to_first_token_seconds_count")
        edges = {key.removeprefix("edge:"): spent for key, spent in delta.items() if key.startswith("edge:")}
        if edges and answered:
            out["edge_ms_per_request"] = {edge: spent / answered * 1e3 for edge, spent in sorted(edges.items())}
    return out


@dataclass
class MeasuredPhase:
    """What `measured_phase` filled in when its block ended: the block's wall seconds and each process's summary."""
    seconds: float = 0.0
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)


@contextmanager
def measured_phase(read: Callable[[], dict[str, StageReading]]) -> Iterator[MeasuredPhase]:
    """Reads every process (`read`, e.g. `Mesh.readings`) before and after the block; fills the phase it yields."""
    phase = MeasuredPhase()
    before, t0 = read(), time.perf_counter()
    yield phase
    phase.seconds, after = time.perf_counter() - t0, read()
    phase.stages = {name: phase_summary(before[name], after[name], phase.seconds) for name in after}
