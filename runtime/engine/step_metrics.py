"""Publishes an engine core's state as the stage's Prometheus series (thinker and talker alike)."""
from __future__ import annotations

from collections.abc import Callable

from runtime.engine.step_core import StepCore, StepStats
from runtime.metrics import Metrics


def bind_engine_metrics(metrics: Metrics, core: StepCore) -> Callable[[StepStats], None]:
    """Gauges read the core when scraped (so an abort between steps shows at once); returns the step hook. A core
    without a block KV cache (`load().kv_usage_ratio` None) sets no KV, token or prefix-cache series: a process
    exposes only the families it sets (deploy/metrics-contract.yaml lists each family's stages)."""
    metrics.get("omnimesh_queue_depth").set_function(lambda: core.load().num_waiting)
    metrics.get("omnimesh_requests_running").set_function(lambda: core.load().num_running)
    step_time = metrics.get("omnimesh_step_time_seconds")
    batch_size = metrics.get("omnimesh_batch_size")
    if core.load().kv_usage_ratio is None:
        def record(stats: StepStats) -> None:
            step_time.observe(stats.seconds)
            if stats.num_rows:  # a step that only moved other work (audio decodes) ran no batch
                batch_size.observe(stats.num_rows)

        return record

    metrics.get("omnimesh_kv_usage_ratio").set_function(lambda: core.load().kv_usage_ratio or 0.0)
    metrics.get("omnimesh_state_slot_usage_ratio").set_function(lambda: core.load().state_usage_ratio or 0.0)
    batch_tokens = metrics.get("omnimesh_batch_tokens")
    prefix_queries = metrics.get("omnimesh_prefix_cache_queries_total")
    prefix_hits = metrics.get("omnimesh_prefix_cache_hits_total")

    def record_kv(stats: StepStats) -> None:
        step_time.observe(stats.seconds)
        batch_size.observe(stats.num_rows)
        batch_tokens.observe(stats.num_tokens)
        prefix_queries.inc(stats.prefix_queried_tokens)
        prefix_hits.inc(stats.prefix_hit_tokens)

    return record_kv
