"""Routes each thinker request to one replica: keeps a ThinkerReplica per endpoint (re-resolving DNS targets), and
asks the configured policy with each serving replica's load and cached prefix of the request."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import NamedTuple

import grpc

from runtime.engine.block_manager import MediaSalts, prompt_block_keys
from runtime.errors import Unavailable
from runtime.metrics import Metrics
from gateway.routing.discovery import Endpoint, needs_resolving, resolve
from gateway.routing.policy import Candidate, Choice, RoundRobin, least_load, prefix_aware
from gateway.routing.replica import ThinkerReplica

log = logging.getLogger(__name__)

Dial = Callable[[Endpoint], grpc.aio.Channel]
REPLICA_GAUGES = ("omnimesh_thinker_replica_in_flight", "omnimesh_thinker_replica_kv_usage_ratio")


class Routed(NamedTuple):
    replica: ThinkerReplica
    choice: Choice


class ThinkerRouter:
    def __init__(self, targets: tuple[str, ...], dial: Dial, policy: str, margin: int, metrics: Metrics,
                 wait_s: float, resolve_s: float) -> None:
        if not targets:
            raise ValueError("config field thinker.address is empty: the gateway needs the thinker's target "
                             "(e.g. 127.0.0.1:50052 or dns:///thinker:50051), or thinker.addresses; pass "
                             "--thinker-addr")
        needs_resolving(targets)  # a malformed DNS target fails here, at start, not on the first request
        self._targets = targets
        self._dial = dial
        self._policy = policy
        self._margin = margin
        self._round_robin = RoundRobin()
        self._metrics = metrics
        self._wait_s = wait_s
        self._resolve_s = resolve_s
        self.replicas: dict[str, ThinkerReplica] = {}
        self._changed = asyncio.Event()
        self._discovery: asyncio.Task | None = None

    async def start(self) -> None:
        await self._sync()
        if needs_resolving(self._targets):
            self._discovery = asyncio.create_task(self._rediscover(), name="thinker-discovery")

    async def close(self) -> None:
        if self._discovery is not None:
            self._discovery.cancel()
            await asyncio.gather(self._discovery, return_exceptions=True)
        await asyncio.gather(*(r.close() for r in self.replicas.values()))
        self.replicas.clear()

    async def _rediscover(self) -> None:
        while True:
            await asyncio.sleep(self._resolve_s)
            await self._sync()

    async def _sync(self) -> None:
        """Opens replicas for new endpoints and closes those DNS no longer lists (a DNS name that resolves to
        nothing keeps what it had: a resolver hiccup must not empty the mesh)."""
        endpoints = {e.target: e for e in await resolve(self._targets)}
        if not endpoints and self.replicas:
            return
        for name in set(self.replicas) - set(endpoints):
            log.info("thinker replica %s left", name)
            await self.replicas.pop(name).close()
            for gauge in REPLICA_GAUGES:  # a pod's IP is not reused for long: its series would linger forever
                self._metrics.forget(gauge, thinker_replica=name)
        for name, ep in endpoints.items():
            if name not in self.replicas:
                log.info("thinker replica %s joined", name)
                self.replicas[name] = replica = ThinkerReplica(name, self._dial(ep), self._on_change)
                self._bind_gauges(replica)
                replica.start()

    def _bind_gauges(self, replica: ThinkerReplica) -> None:
        m = self._metrics
        m.get("omnimesh_thinker_replica_in_flight", thinker_replica=replica.name).set_function(lambda: replica.load)
        m.get("omnimesh_thinker_replica_kv_usage_ratio", thinker_replica=replica.name).set_function(
            lambda: replica.kv_usage)

    def _on_change(self) -> None:
        self._changed.set()

    async def serving(self) -> list[ThinkerReplica]:
        """The replicas serving now, waiting up to `wait_s` for one when none is (a mesh still starting)."""
        deadline = asyncio.get_running_loop().time() + self._wait_s
        while True:
            ready = [r for r in self.replicas.values() if r.serving]
            left = deadline - asyncio.get_running_loop().time()
            if ready or left <= 0:
                break
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        if not ready:
            raise Unavailable(f"no thinker replica is serving ({len(self.replicas)} known: "
                              f"{', '.join(sorted(self.replicas)) or 'none resolved'}); waited {self._wait_s:.1f} s",
                              stage="thinker")
        return ready

    async def route(self, token_ids: list[int], media_salts: MediaSalts, reuses_cache: bool) -> Routed:
        """The replica for a request with this prompt; `reuses_cache` false (its KV must be computed afresh) routes
        it by load alone. The prompt's blocks are then expected on that replica."""
        ready = await self.serving()
        keys_by_size: dict[int, list[bytes]] = {}

        def keys(replica: ThinkerReplica) -> list[bytes]:
            size = replica.index.block_size
            if not size or not replica.index.prefix_cache:
                return []
            if size not in keys_by_size:  # replicas normally share one block size: hashed once
                keys_by_size[size] = prompt_block_keys(token_ids, media_salts, size)
            return keys_by_size[size]

        candidates = [Candidate(r.name, r.load, r.index.prefix_blocks(keys(r)) if reuses_cache else 0) for r in ready]
        if self._policy == "round_robin":
            choice = self._round_robin(candidates)
        elif self._policy == "least_load":
            choice = least_load(candidates)
        else:
            choice = prefix_aware(candidates, self._margin)
        replica = self.replicas[choice.name]
        replica.index.expect(keys(replica))
        self._metrics.get("omnimesh_thinker_routed_total", thinker_replica=replica.name,
                          decision=choice.decision).inc()
        self._metrics.get("omnimesh_thinker_routed_prefix_tokens_total", thinker_replica=replica.name).inc(
            choice.prefix_blocks * replica.index.block_size)
        return Routed(replica, choice)

    async def any_replica(self) -> ThinkerReplica:
        """A replica for calls any of them answers (Info): a serving one, else any known one."""
        ready = [r for r in self.replicas.values() if r.serving]
        if ready:
            return ready[0]
        if self.replicas:
            return next(iter(self.replicas.values()))
        return (await self.serving())[0]
