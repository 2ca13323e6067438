"""Publishes each engine step's stats as the stage's Prometheus series (thinker and talker alike)."""
from __future__ import annotations

from collections.abc import Callable

from runtime.engine.engine import StepStats
from runtime.metrics import Metrics


def step_recorder(metrics: Metrics) -> Callable[[StepStats], None]:
    step_time = metrics.get("omnimesh_step_time_seconds")
    batch_size = metrics.get("omnimesh_batch_size")
    batch_tokens = metrics.get("omnimesh_batch_tokens")
    waiting = metrics.get("omnimesh_queue_depth")
    running = metrics.get("omnimesh_requests_running")
    kv = metrics.get("omnimesh_kv_usage_ratio")

    def record(stats: StepStats) -> None:
        step_time.observe(stats.seconds)
        batch_size.observe(stats.num_rows)
        batch_tokens.observe(stats.num_tokens)
        waiting.set(stats.num_waiting)
        running.set(stats.num_running)
        kv.set(stats.kv_usage_ratio)

    return record
