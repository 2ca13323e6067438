"""Client channels between stages: message limits, keepalive, round_robin over every resolved address that reports
SERVING on grpc.health.v1 (a replica whose compute failed, or that drains, gets no new calls from the moment it says
so, before Kubernetes has taken it out of DNS), retries, a short reconnect backoff."""
from __future__ import annotations

import json

import grpc

from runtime.stage_auth import token_interceptors

# Retries only before the first response arrives, which is right for generation (docs/grpc-transport.md).
_SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": ""},
    "methodConfig": [{
        "name": [{}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.5s", "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE"]},
    }],
})


def channel_options(max_message_bytes: int = 16 << 20) -> list[tuple[str, object]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),  # >= 20 s: servers close connections that ping more often
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.enable_retries", 1),
        # A stage that restarts (a GPU pod reloading weights for minutes) is reconnected within a second of its
        # return: gRPC's default backoff grows to 120 s, and the gateway answered UNAVAILABLE for 8 s after a 12 s
        # thinker outage (tests/integration/test_stage_restart.py). A refused connect attempt a second is nothing.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
        ("grpc.service_config", _SERVICE_CONFIG),
    ]


def open_channel(target: str, max_message_bytes: int = 16 << 20, token: str = "",
                 credentials: grpc.ChannelCredentials | None = None, authority: str = "",
                 own_connection: bool = False) -> grpc.aio.Channel:
    """An aio channel to a stage, TLS when given `credentials` (runtime/tls.py); `dns:///name:port` targets balance
    over every pod IP. `token`: the stage token every call carries (runtime/stage_auth.py). `authority`: the name
    a target given as a pod IP answers to (its Service's), which its TLS certificate is checked against.
    `own_connection`: on connections no other channel of the process shares (by default equal channels share one),
    so that processes sharing a port (gateway replicas) each serve some of a client's channels."""
    options, interceptors = channel_options(max_message_bytes), token_interceptors(token)
    if own_connection:
        options.append(("grpc.use_local_subchannel_pool", 1))
    if authority:
        options.append(("grpc.default_authority", authority))
        if credentials is not None:
            options.append(("grpc.ssl_target_name_override", authority))
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(target, credentials, options=options, interceptors=interceptors)
