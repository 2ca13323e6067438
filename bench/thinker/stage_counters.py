"""What each stage's engine did over a measured phase: deltas of its step histograms, read from its /metrics.

A mesh benchmark reads the counters when its phase starts and when it stops; the difference says how many engine
steps ran, how long one took on average and how many rows it carried, per stage. That splits a level's throughput
into its stages' shares without a profiler (the talker counts an iteration as a step and a frame as a batch).
"""
from __future__ import annotations

import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

STEP_SERIES = ("omnimesh_step_time_seconds", "omnimesh_batch_size")


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


def phase_summary(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, Any]:
    """Steps per second, mean step time and mean rows per batch over a phase of `seconds`."""
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    steps = delta.get("omnimesh_step_time_seconds_count", 0.0)
    batches = delta.get("omnimesh_batch_size_count", 0.0)
    return {"steps_per_s": steps / seconds,
            "step_ms_mean": delta["omnimesh_step_time_seconds_sum"] / steps * 1e3 if steps else None,
            "batches_per_s": batches / seconds,
            "rows_per_batch": delta["omnimesh_batch_size_sum"] / batches if batches else None}
