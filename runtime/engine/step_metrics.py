"""Publishes the engine's state as the stage's Prometheus series (thinker and talker alike)."""
from __future__ import annotations

from collections.abc import Callable

from runtime.engine.engine import StepStats
from runtime.engine.scheduler import Scheduler
from runtime.engine.slow_steps import SlowStepLog
from runtime.metrics import Metrics


def bind_engine_metrics(metrics: Metrics, scheduler: Scheduler) -> Callable[[StepStats], None]:
    """Gauges read the scheduler when scraped (so an abort between steps shows at once); returns the step hook, which
    also warns about slow steps (SlowStepLog)."""
    metrics.get("omnimesh_queue_depth").set_function(lambda: len(scheduler.waiting))
    metrics.get("omnimesh_requests_running").set_function(lambda: len(scheduler.running))
    metrics.get("omnimesh_kv_usage_ratio").set_function(lambda: scheduler.blocks.usage_ratio)
    step_time = metrics.get("omnimesh_step_time_seconds")
    batch_size = metrics.get("omnimesh_batch_size")
    batch_tokens = metrics.get("omnimesh_batch_tokens")
    prefix_queries = metrics.get("omnimesh_prefix_cache_queries_total")
    prefix_hits = metrics.get("omnimesh_prefix_cache_hits_total")
    slow = SlowStepLog(metrics.stage)

    def record(stats: StepStats) -> None:
        step_time.observe(stats.seconds)
        batch_size.observe(stats.num_rows)
        batch_tokens.observe(stats.num_tokens)
        prefix_queries.inc(stats.prefix_queried_tokens)
        prefix_hits.inc(stats.prefix_hit_tokens)
        slow(stats)

    return record
