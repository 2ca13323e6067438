"""Prometheus metrics: every omnimesh_* series, labelled stage and replica, in a registry of the process's own."""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# Bounds for LLM latencies, after vLLM's: fine below a second where TTFT/ITL live, coarse up to minutes for E2E.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
               0.75, 1.0, 2.5)
E2E_BUCKETS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
STEP_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)
COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

BASE = ("stage", "replica")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


# The contract with deploy/ (rules, dashboard): tests check deploy/metrics-contract.yaml names exactly these.
SPECS: tuple[MetricSpec, ...] = (
    # gateway: the user-facing SLIs
    MetricSpec("omnimesh_requests_total", "counter", "Chat requests by outcome and gRPC code.", ("outcome", "code")),
    MetricSpec("omnimesh_requests_in_flight", "gauge", "Chat streams open now."),
    MetricSpec("omnimesh_time_to_first_token_seconds", "histogram", "Request start to first text token.", (),
               TTFT_BUCKETS),
    MetricSpec("omnimesh_inter_token_latency_seconds", "histogram", "Gap between text tokens, per token.", (),
               ITL_BUCKETS),
    MetricSpec("omnimesh_e2e_request_latency_seconds", "histogram",
               "Request start to its last event, of requests that ended OK.", (),
               E2E_BUCKETS),
    MetricSpec("omnimesh_time_to_first_audio_seconds", "histogram", "Request start to first audio chunk.", (),
               TTFT_BUCKETS),
    MetricSpec("omnimesh_audio_real_time_factor", "histogram", "Wall time over seconds of audio, per request.", (),
               RTF_BUCKETS),
    MetricSpec("omnimesh_audio_underruns_total", "counter", "Audio chunks that arrived after the previous ran out."),
    MetricSpec("omnimesh_prompt_tokens_total", "counter", "Prompt tokens of finished requests."),
    MetricSpec("omnimesh_generation_tokens_total", "counter", "Generated text tokens."),
    # stages
    MetricSpec("omnimesh_queue_time_seconds", "histogram", "Time a request waited before its first batch.", (),
               TTFT_BUCKETS),
    MetricSpec("omnimesh_queue_depth", "gauge", "Requests waiting for a batch."),
    MetricSpec("omnimesh_stage_failures_total", "counter",
               "Times this process's compute failed for good (engine thread died, device fault); it then reports "
               "NOT_SERVING until restarted."),
    MetricSpec("omnimesh_requests_running", "gauge", "Requests in the running batch."),
    MetricSpec("omnimesh_kv_usage_ratio", "gauge", "Share of KV cache blocks in use."),
    MetricSpec("omnimesh_batch_size", "histogram", "Rows per step.", (), COUNT_BUCKETS),
    MetricSpec("omnimesh_batch_tokens", "histogram", "Tokens per step.", (), TOKEN_BUCKETS),
    MetricSpec("omnimesh_step_time_seconds", "histogram", "Wall time of one engine step.", (), STEP_BUCKETS),
    MetricSpec("omnimesh_encoder_latency_seconds", "histogram", "Wall time of one encoder forward.", (), STEP_BUCKETS),
    MetricSpec("omnimesh_encoder_items_per_batch", "histogram", "Media items per encoder forward.", (), COUNT_BUCKETS),
    MetricSpec("omnimesh_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache."),
    MetricSpec("omnimesh_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache."),
    MetricSpec("omnimesh_edge_bytes_total", "counter", "Payload bytes sent from one stage to another.",
               ("from_stage", "to_stage")),
    MetricSpec("omnimesh_edge_seconds_total", "counter", "Seconds spent moving payloads between stages.",
               ("from_stage", "to_stage")),
    # gRPC server
    MetricSpec("omnimesh_grpc_server_started_total", "counter", "RPCs started.", ("grpc_service", "grpc_method")),
    MetricSpec("omnimesh_grpc_server_handled_total", "counter", "RPCs completed, by status code.",
               ("grpc_service", "grpc_method", "grpc_code")),
    MetricSpec("omnimesh_grpc_server_handling_seconds", "histogram", "RPC duration.", ("grpc_service", "grpc_method"),
               E2E_BUCKETS),
)


class Metrics:
    """All omnimesh series of one process, with `stage` and `replica` already applied.

    `m.get("omnimesh_queue_depth")` is the child for this stage/replica; labelled families take the rest:
    `m.get("omnimesh_requests_total", outcome="ok", code="OK")`. Each instance owns its registry so several
    servers can live in one test process.
    """

    def __init__(self, stage: str, replica: str) -> None:
        self.stage = stage
        self.replica = replica
        self.registry = CollectorRegistry()
        self._families = {}
        for spec in SPECS:
            labels = BASE + spec.labels
            if spec.kind == "counter":
                fam = Counter(_strip_total(spec.name), spec.help, labels, registry=self.registry)
            elif spec.kind == "gauge":
                fam = Gauge(spec.name, spec.help, labels, registry=self.registry)
            else:
                fam = Histogram(spec.name, spec.help, labels, buckets=spec.buckets, registry=self.registry)
            self._families[spec.name] = fam
        for spec in SPECS:  # unlabelled series exist (at 0) from the start, so dashboards show them
            if not spec.labels:
                self.get(spec.name)

    def get(self, name: str, **labels: str):
        return self._families[name].labels(stage=self.stage, replica=self.replica, **labels)

    def serve(self, host: str, port: int) -> int:
        """Starts the /metrics HTTP endpoint; returns the bound port (port 0 picks a free one)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server.server_address[1]


def _strip_total(name: str) -> str:
    # prometheus_client appends _total to counters itself.
    return name[: -len("_total")] if name.endswith("_total") else name
