"""One thinker replica as the gateway sees it: its channel, whether it serves, what it caches, how loaded it is."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omnimesh.v1 import thinker_pb2, thinker_pb2_grpc
from gateway.routing.index import CacheIndex

log = logging.getLogger(__name__)

REPORT_INTERVAL_MS = 100  # CacheEvents interval: the load a router sees is this old at most
RETRY_S = 0.5  # after a broken health watch or event stream; a replica that restarts is back within it


class ThinkerReplica:
    """Follows the replica's health (grpc.health.v1 Watch) and its CacheEvents stream on two tasks. `serving` turns
    false the moment the watch breaks or answers anything but SERVING, or a call to it fails UNAVAILABLE (`suspect`),
    so it gets no new requests; a broken event stream empties its index until the next snapshot."""

    def __init__(self, name: str, channel: grpc.aio.Channel, on_change: Callable[[], None]) -> None:
        self.name = name
        self.channel = channel
        self.stub = thinker_pb2_grpc.ThinkerStub(channel)
        self.index = CacheIndex()
        self.serving = False
        self.others_load = 0  # other gateways' requests on it, as of its last report: its total less ours then
        self.kv_usage = 0.0
        self.in_flight = 0  # this gateway's requests on it now: exact, where the report lags by an interval
        self._on_change = on_change
        self._tasks: list[asyncio.Task] = []
        self._watch: grpc.aio.UnaryStreamCall | None = None

    @property
    def load(self) -> int:
        """Requests in flight on it (running + waiting): ours counted now, other gateways' as last reported. Ours
        taken from the report instead would lag it, and move conversations off a replica that just freed up."""
        return self.others_load + self.in_flight

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._watch_health(), name=f"health-{self.name}"),
                       asyncio.create_task(self._follow_cache(), name=f"cache-{self.name}")]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.channel.close()

    @contextlib.contextmanager
    def carrying(self) -> Iterator[None]:
        """Counts a request of ours on it for as long as its stream is open."""
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def suspect(self) -> None:
        """A call to it failed UNAVAILABLE: no new requests until its health service answers SERVING again (the
        watch may not have seen the failure yet: a connection reset reaches the calls first)."""
        self._set_serving(False)
        if self._watch is not None:
            self._watch.cancel()  # the watch loop asks again after RETRY_S

    def _set_serving(self, serving: bool) -> None:
        if serving != self.serving:
            log.info("thinker replica %s: %s", self.name, "serving" if serving else "not serving")
            self.serving = serving
            self._on_change()

    async def _watch_health(self) -> None:
        """Watches while SERVING; any other answer ends the watch at once (a draining server waits for open calls,
        and a watch would hold it for its whole grace period) and it is asked again after RETRY_S."""
        stub = health_pb2_grpc.HealthStub(self.channel)
        while True:
            self._watch = call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
            try:
                async for answer in call:
                    if answer.status != health_pb2.HealthCheckResponse.SERVING:
                        break
                    self._set_serving(True)
            except grpc.aio.AioRpcError as err:
                log.debug("thinker replica %s: health watch ended (%s)", self.name, err.code().name)
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():  # close(), not suspect()
                    raise
            finally:
                call.cancel()
            self._set_serving(False)
            await asyncio.sleep(RETRY_S)

    async def _follow_cache(self) -> None:
        while True:
            try:
                async for event in self.stub.CacheEvents(thinker_pb2.CacheEventsRequest(
                        interval_ms=REPORT_INTERVAL_MS)):
                    self.index.apply(event.snapshot, list(event.stored), list(event.evicted), event.block_size,
                                     event.prefix_cache, event.needs_state, list(event.states_stored),
                                     list(event.states_evicted))
                    self.others_load = max(0, event.load.running + event.load.waiting - self.in_flight)
                    self.kv_usage = event.load.kv_usage
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.UNIMPLEMENTED:  # a thinker older than routing: by load alone
                    log.warning("thinker replica %s has no CacheEvents; routing to it by load only", self.name)
                    return
                log.debug("thinker replica %s: cache events ended (%s)", self.name, err.code().name)
            self.index.forget()
            self.others_load, self.kv_usage = 0, 0.0
            await asyncio.sleep(RETRY_S)
