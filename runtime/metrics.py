"""Prometheus metrics: the omnimesh_* series a stage has, labelled stage, replica and model_name, beside the
process_* series, in a registry of the process's own."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from prometheus_client import disable_created_metrics

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

BASE = ("stage", "replica", "model_name")
STAGES = ("gateway", "vision", "audio", "thinker", "talker")
GATEWAY = ("gateway",)
MODEL_STAGES = ("vision", "audio", "thinker", "talker")
ENGINES = ("thinker", "talker")
ENCODERS = ("vision", "audio")
THINKER = ("thinker",)
FINISH_REASONS = ("stop", "length", "abort")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    stages: tuple[str, ...] = STAGES  # the processes that expose it (a family no code of a stage sets is left out)


# The contract with deploy/ (rules, dashboard): tests check deploy/metrics-contract.yaml names exactly these.
SPECS: tuple[MetricSpec, ...] = (
    # gateway: the user-facing SLIs
    MetricSpec("omnimesh_requests_total", "counter", "Chat requests by outcome and gRPC code.", ("outcome", "code"), stages=GATEWAY),
    MetricSpec("omnimesh_requests_in_flight", "gauge", "Chat streams open now.", stages=GATEWAY),
    MetricSpec("omnimesh_time_to_first_token_seconds", "histogram", "Request start to first text token.", (),
               TTFT_BUCKETS, stages=GATEWAY),
    MetricSpec("omnimesh_request_phase_seconds", "histogram",
               "Time answered calls spent in each phase on their way through the gateway (gateway/timeline.py).",
               ("phase",), TTFT_BUCKETS, stages=GATEWAY),
    MetricSpec("omnimesh_inter_token_latency_seconds", "histogram", "Gap between text tokens, per token.", (),
               ITL_BUCKETS, stages=GATEWAY),
    MetricSpec("omnimesh_e2e_request_latency_seconds", "histogram",
               "Request start to its last event, of requests that ended OK.", (),
               E2E_BUCKETS, stages=GATEWAY),
    MetricSpec("omnimesh_time_to_first_audio_seconds", "histogram", "Request start to first audio chunk.", (),
               TTFT_BUCKETS, stages=GATEWAY),
    MetricSpec("omnimesh_audio_real_time_factor", "histogram", "Wall time over seconds of audio, per request.", (),
               RTF_BUCKETS, stages=GATEWAY),
    MetricSpec("omnimesh_audio_underruns_total", "counter", "Audio chunks that arrived after the previous ran out.", stages=GATEWAY),
    MetricSpec("omnimesh_finished_requests_total", "counter",
               "Chat and transcription requests by how they ended: stop (end of turn, stop token or string), length "
               "(max_tokens or the context), abort (cancelled, past its deadline, or failed).", ("finish_reason",),
               stages=GATEWAY),
    MetricSpec("omnimesh_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", stages=GATEWAY),
    MetricSpec("omnimesh_generation_tokens_total", "counter", "Generated text tokens.", stages=GATEWAY),
    # stages
    MetricSpec("omnimesh_queue_time_seconds", "histogram", "Time a request waited before its first batch.", (),
               TTFT_BUCKETS, stages=MODEL_STAGES),
    MetricSpec("omnimesh_queue_depth", "gauge", "Requests waiting for a batch.", stages=MODEL_STAGES),
    MetricSpec("omnimesh_stage_failures_total", "counter",
               "Times this process's compute failed for good (engine thread died, device fault); it then reports "
               "NOT_SERVING until restarted.", stages=MODEL_STAGES),
    MetricSpec("omnimesh_requests_running", "gauge", "Requests in the running batch.", stages=ENGINES),
    MetricSpec("omnimesh_kv_usage_ratio", "gauge", "Share of KV cache blocks in use.", stages=THINKER),
    MetricSpec("omnimesh_state_slot_usage_ratio", "gauge",
               "Share of a hybrid model's linear-attention state slots (thinker.engine.num_state_slots) held by "
               "requests; 0 on a model without them.", stages=THINKER),
    MetricSpec("omnimesh_batch_size", "histogram", "Rows per step.", (), COUNT_BUCKETS, stages=ENGINES),
    MetricSpec("omnimesh_batch_tokens", "histogram", "Tokens per step.", (), TOKEN_BUCKETS, stages=THINKER),
    MetricSpec("omnimesh_step_time_seconds", "histogram", "Wall time of one engine step, from its launch or, "
               "launched ahead, from the read of the step before it.", (), STEP_BUCKETS, stages=ENGINES),
    MetricSpec("omnimesh_encoder_latency_seconds", "histogram", "Wall time of one encoder forward.", (), STEP_BUCKETS, stages=ENCODERS),
    MetricSpec("omnimesh_encoder_items_per_batch", "histogram", "Media items per encoder forward.", (), COUNT_BUCKETS, stages=ENCODERS),
    MetricSpec("omnimesh_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", stages=THINKER),
    MetricSpec("omnimesh_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", stages=THINKER),
    MetricSpec("omnimesh_edge_bytes_total", "counter", "Payload bytes sent from one stage to another.",
               ("from_stage", "to_stage"), stages=GATEWAY),
    MetricSpec("omnimesh_edge_seconds_total", "counter", "Seconds spent moving payloads between stages.",
               ("from_stage", "to_stage"), stages=GATEWAY),
    # gateway: thinker replica routing (gateway/routing/), one series per replica the gateway knows
    MetricSpec("omnimesh_thinker_routed_total", "counter",
               "Thinker requests routed to each replica, by why it was picked (prefix, load_guard, least_load, "
               "round_robin).", ("thinker_replica", "decision"), stages=GATEWAY),
    MetricSpec("omnimesh_thinker_routed_prefix_tokens_total", "counter",
               "Prompt tokens the routed replica held in its prefix cache when picked, by the gateway's index.",
               ("thinker_replica",), stages=GATEWAY),
    MetricSpec("omnimesh_thinker_replica_in_flight", "gauge",
               "Requests in flight (running + waiting) on each thinker replica, as the router sees it.",
               ("thinker_replica",), stages=GATEWAY),
    MetricSpec("omnimesh_thinker_replica_kv_usage_ratio", "gauge",
               "Share of each thinker replica's KV blocks held by requests, as it last reported.",
               ("thinker_replica",), stages=GATEWAY),
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

    def __init__(self, stage: str, replica: str, model_name: str = "") -> None:
        if stage not in STAGES:
            raise ValueError(f"stage {stage!r}: expected one of {STAGES}")
        disable_created_metrics()  # a _created series per counter and histogram doubles what Prometheus stores
        self.stage = stage
        self.replica = replica
        self.model_name = model_name
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
        self._families = {}
        # (name, *label items) -> child: prometheus_client validates and joins the labels on every `labels()` call,
        # ~4 us that a gateway paid a few dozen times a request (py-spy on an H100)
        self._children: dict[tuple, Any] = {}
        for spec in self.specs:
            labels = BASE + spec.labels
            if spec.kind == "counter":
                fam = Counter(_strip_total(spec.name), spec.help, labels, registry=self.registry)
            elif spec.kind == "gauge":
                fam = Gauge(spec.name, spec.help, labels, registry=self.registry)
            else:
                fam = Histogram(spec.name, spec.help, labels, buckets=spec.buckets, registry=self.registry)
            self._families[spec.name] = fam
        for spec in self.specs:  # unlabelled series exist (at 0) from the start, so dashboards show them
            if not spec.labels:
                self.get(spec.name)

    @property
    def specs(self) -> list[MetricSpec]:
        """The families this stage exposes."""
        return [spec for spec in SPECS if self.stage in spec.stages]

    def get(self, name: str, **labels: str):
        key = (name, *labels.items())
        child = self._children.get(key)
        if child is None:
            child = self._families[name].labels(stage=self.stage, replica=self.replica, model_name=self.model_name,
                                                **labels)
            self._children[key] = child
        return child

    def forget(self, name: str, **labels: str) -> None:
        """Drops one labelled series (e.g. of a thinker replica that left), so it is no longer exposed."""
        self._families[name].remove(self.stage, self.replica, self.model_name, *labels.values())
        # the family's kept children are dropped with it: `get` finds the others again in prometheus_client
        self._children = {key: child for key, child in self._children.items() if key[0] != name}

    def serve(self, host: str, port: int) -> int:
        """Starts the /metrics HTTP endpoint; returns the bound port (port 0 picks a free one)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server.server_address[1]


def _strip_total(name: str) -> str:
    # prometheus_client appends _total to counters itself.
    return name[: -len("_total")] if name.endswith("_total") else name
