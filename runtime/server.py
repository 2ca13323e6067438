"""The grpc.aio server every stage runs: health, reflection, error mapping, metrics endpoint, drain on SIGTERM."""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtime.config import ServerConfig
from runtime.heartbeat import Heartbeat
from runtime.interceptor import ErrorMappingInterceptor
from runtime.metrics import Metrics
from runtime.stage_auth import StageTokenInterceptor
from runtime.tls import server_credentials

log = logging.getLogger(__name__)

READY_PREFIX = "OMNIMESH_READY "  # the line `omnimesh up` waits for on a child's stdout


def server_options(cfg: ServerConfig, max_receive_bytes: int | None = None) -> list[tuple[str, Any]]:
    """`max_receive_bytes` (default: cfg.max_message_bytes) lets a servicer read a request over the limit and refuse it
    with an error of its own, naming the config field."""
    return [
        # a second server on a port in use must fail, not share it silently, unless sharing is what was asked for
        ("grpc.so_reuseport", int(cfg.share_port)),
        ("grpc.max_send_message_length", cfg.max_message_bytes),
        ("grpc.max_receive_message_length", max_receive_bytes or cfg.max_message_bytes),
        # Accept client keepalive pings, even during a long silent prefill (docs/grpc-transport.md: "Too many pings").
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.keepalive_time_ms", cfg.keepalive_time_ms),
        ("grpc.max_connection_age_ms", cfg.max_connection_age_ms),
        ("grpc.max_connection_age_grace_ms", cfg.max_connection_age_grace_ms),
    ]


class BoundPorts(NamedTuple):
    grpc_port: int
    metrics_port: int  # -1 when disabled
    health_port: int = -1  # the plaintext health-only port; -1 when there is none


class StageServer:
    """One process's server. Add servicers, `await start()`, then `await serve_until_signal()`."""

    def __init__(self, stage: str, replica: str, cfg: ServerConfig, metrics: Metrics,
                 max_receive_bytes: int | None = None, stage_token: str = "") -> None:
        """`stage_token`: calls without it are refused UNAUTHENTICATED (health excepted); empty: no token."""
        self.stage = stage
        self.replica = replica
        self.cfg = cfg
        self.metrics = metrics
        interceptors: list[grpc.aio.ServerInterceptor] = [ErrorMappingInterceptor(metrics)]
        if stage_token:
            interceptors.append(StageTokenInterceptor(stage_token))
        self.server = grpc.aio.server(interceptors=interceptors, options=server_options(cfg, max_receive_bytes))
        self._credentials = server_credentials(cfg, f"{stage}.server")  # read now: a bad path fails before loading
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # the same servicer on its own server, so the probes' port answers exactly what the main port does
        self._health_server: grpc.aio.Server | None = None
        if cfg.health_port >= 0:
            self._health_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self._health_server)
        self._services: list[str] = []
        self._draining = asyncio.Event()
        self._failure_checks: list[tuple[str, Callable[[], BaseException | None], Heartbeat, float]] = []
        self._watch: asyncio.Task | None = None

    def add_service(self, add_fn: Callable[[Any, grpc.aio.Server], None], servicer: Any, full_name: str) -> None:
        add_fn(servicer, self.server)
        self._services.append(full_name)

    def not_serving_when(self, what: str, failure: Callable[[], BaseException | None], heartbeat: Heartbeat,
                         stall_timeout_s: float) -> None:
        """Reports NOT_SERVING for good once `failure()` returns an error or `heartbeat` has been inside one iteration
        for over `stall_timeout_s` (0: never). An engine whose thread died answers every request UNAVAILABLE, and one
        on a hung device answers none: readiness must take this replica out of its Service and liveness restart it."""
        self._failure_checks.append((what, failure, heartbeat, stall_timeout_s))

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    async def start(self) -> BoundPorts:
        names = [*self._services, health.SERVICE_NAME, reflection.SERVICE_NAME]
        reflection.enable_server_reflection(names, self.server)
        address = f"{self.cfg.host}:{self.cfg.port}"
        try:
            if self._credentials is None:
                port = self.server.add_insecure_port(address)
            else:
                port = self.server.add_secure_port(address, self._credentials)
        except RuntimeError as e:  # grpcio raises RuntimeError where older versions returned 0
            raise OSError(f"could not bind {self.cfg.host}:{self.cfg.port}: {e}") from None
        if port == 0:
            raise OSError(f"could not bind {self.cfg.host}:{self.cfg.port}")
        await self.server.start()
        health_port = -1 if self._health_server is None else await self._start_health_port()
        metrics_port = -1 if self.cfg.metrics_port < 0 else self.metrics.serve(self.cfg.host, self.cfg.metrics_port)
        for name in ("", *self._services):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self._failure_checks:
            self._watch = asyncio.create_task(self._watch_failures(), name="failure-watch")
        log.info("%s serving gRPC%s on %s:%d, metrics on %d%s", self.stage, "" if self._credentials is None else " (TLS)",
                 self.cfg.host, port, metrics_port, "" if health_port < 0 else f", health (plaintext) on {health_port}")
        return BoundPorts(port, metrics_port, health_port)

    async def _start_health_port(self) -> int:
        assert self._health_server is not None
        try:
            port = self._health_server.add_insecure_port(f"{self.cfg.host}:{self.cfg.health_port}")
        except RuntimeError as e:
            raise OSError(f"could not bind the health port {self.cfg.host}:{self.cfg.health_port}: {e}") from None
        await self._health_server.start()
        return port

    async def _watch_failures(self, period_s: float = 0.5) -> None:
        while True:  # a poll: the engines fail on their own threads, and this costs nothing between failures
            for what, failure, heartbeat, stall_timeout_s in self._failure_checks:
                err = failure() or heartbeat.stuck(stall_timeout_s)
                if err is not None:
                    log.error("%s has failed (%r): reporting NOT_SERVING so this replica is taken out of service and "
                              "restarted", what, err)
                    self.metrics.get("omnimesh_stage_failures_total").inc()
                    for name in ("", *self._services):
                        await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
                    return
            await asyncio.sleep(period_s)

    async def stop(self, grace: float | None = None) -> None:
        """Drain: report NOT_SERVING, refuse new calls, let in-flight streams finish within the grace period."""
        if self._watch is not None:
            self._watch.cancel()
        self._draining.set()
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.cfg.drain_grace_s if grace is None else grace)
        if self._health_server is not None:
            await self._health_server.stop(0)

    async def serve_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("%s draining (grace %.0f s)", self.stage, self.cfg.drain_grace_s)
        await self.stop()
        log.info("%s stopped", self.stage)


def announce_ready(ports: BoundPorts) -> None:
    """Tells a supervising `omnimesh up` where this child listens (it may have asked for port 0)."""
    sys.stdout.write(READY_PREFIX + json.dumps(ports._asdict()) + "\n")
    sys.stdout.flush()
