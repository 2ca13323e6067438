"""What each process of a mesh did over a measured phase: its engine's step histograms (from its /metrics) and the
CPU its process, its asyncio thread and each of its threads used (from /proc).

A mesh benchmark reads both when its phase starts and when it stops; the differences say how many engine steps ran,
how long one took on average and how many rows it carried (the talker counts an iteration as a step and a frame as
a batch), and how busy each process's event loop was: a loop near one core is a relay that holds the mesh back.
"""
from __future__ import annotations

import urllib.request
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from bench.thinker.proc_cpu import CpuTimes, busiest_threads, cpu_times

STEP_SERIES = ("omnimesh_step_time_seconds", "omnimesh_batch_size")


class StageReading(NamedTuple):
    steps: dict[str, float] | None  # read_counters' (None: the process has no engine)
    cpu: CpuTimes | None  # None: no /proc here


def read_counters(metrics_port: int, timeout_s: float = 5.0) -> dict[str, float]:
    """The `_sum` and `_count` of the stage's step histograms (summed over their labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in STEP_SERIES:
            for sample in family.samples:
                if sample.name.endswith(("_sum", "_count")):
                    out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def read_stage(pid: int, metrics_port: int | None) -> StageReading:
    try:
        cpu = cpu_times(pid)
    except OSError:
        cpu = None
    return StageReading(read_counters(metrics_port) if metrics_port else None, cpu)


def phase_summary(before: StageReading, after: StageReading, seconds: float) -> dict[str, Any]:
    """Per second of the phase: engine steps and batches, with the mean step time and rows a batch; CPU seconds of
    the process (all threads), of its asyncio thread and of its busiest thread names (name, threads, cores)."""
    out: dict[str, Any] = {}
    if before.cpu is not None and after.cpu is not None:
        used = after.cpu - before.cpu
        out |= {"cpu_process": used.process_s / seconds, "cpu_event_loop": used.main_thread_s / seconds,
                "cpu_threads": [[name, count, cores] for name, count, cores in busiest_threads(used, seconds)]}
    if before.steps is not None and after.steps is not None:
        delta = {name: after.steps.get(name, 0.0) - before.steps.get(name, 0.0) for name in after.steps}
        steps = delta.get("omnimesh_step_time_seconds_count", 0.0)
        batches = delta.get("omnimesh_batch_size_count", 0.0)
        out |= {"steps_per_s": steps / seconds,
                "step_ms_mean": delta["omnimesh_step_time_seconds_sum"] / steps * 1e3 if steps else None,
                "batches_per_s": batches / seconds,
                "rows_per_batch": delta["omnimesh_batch_size_sum"] / batches if batches else None}
    return out
