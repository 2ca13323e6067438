"""Starts stage processes, waits until each is ready and healthy, and stops them all together."""
from __future__ import annotations

import json
import logging
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runtime.server import READY_PREFIX

log = logging.getLogger(__name__)


class StartFailed(RuntimeError):
    """A child did not come up; its own log (above, on the shared stderr) says why."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    host: str  # where its health service is dialled
    grpc_port: int = 0
    metrics_port: int = -1
    http_port: int = 0  # an HTTP child (the OpenAI front): health is GET /health, it has no gRPC port
    # its own plaintext health port, probed instead of grpc_port: a port several processes share (gateway replicas)
    # would answer for whichever of them the kernel picked
    health_port: int = -1
    command: list[str] = field(default_factory=list)  # to start it again
    restarts: int = 0
    restart_at: float | None = None  # when a failed child is started again (its backoff)

    def pinned_command(self) -> list[str]:
        """Its command with the ports it got first, so peers and scrapers find it where it was (last flag wins)."""
        if self.http_port:
            return [*self.command, "--port", str(self.http_port)]
        metrics = ["--metrics-port", str(self.metrics_port)] if self.metrics_port >= 0 else []
        health = ["--health-port", str(self.health_port)] if self.health_port >= 0 else []
        return [*self.command, "--port", str(self.grpc_port), *metrics, *health]

    @property
    def health_target(self) -> str:
        return target(self.host, self.health_port if self.health_port > 0 else self.grpc_port)


MAX_BACKOFF_S = 30.0  # Kubernetes' CrashLoopBackOff doubles to 5 minutes; a local mesh wants its stage back sooner


def dial_host(listen_host: str) -> str:
    """The address to reach a server that listens on `listen_host`: a wildcard is reached on loopback."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1", "": "127.0.0.1"}.get(listen_host, listen_host)


def target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class Supervisor:
    def __init__(self, host: str) -> None:
        self.host = host
        self.children: list[Child] = []

    def start(self, name: str, module: str, args: list[str], ready_timeout_s: float, host: str | None = None
              ) -> Child:  # fmt: skip
        """Runs `python -m module args`, waits for its ready line and a SERVING health check; `host`: where the
        child listens, when not on this supervisor's host (the gateway on `--host`)."""
        (child,) = self.start_together([(name, module, args)], ready_timeout_s, host)
        return child

    def start_together(self, specs: list[tuple[str, str, list[str]]], ready_timeout_s: float,
                       host: str | None = None) -> list[Child]:
        """Runs every (name, module, args) at once and waits until all are ready and healthy, so they load in
        parallel: the stages of a mesh need nothing from one another to come up (at the released dims the
        thinker's load overlaps the talker's graph captures). The first failure is raised as soon as it happens;
        the caller's `stop_all` then ends the others."""
        children = []
        for name, module, args in specs:
            cmd = [sys.executable, "-m", module, *args]
            log.info("starting %s: %s", name, " ".join(cmd))
            children.append(Child(name, subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True),
                                  dial_host(host or self.host), command=cmd))
            self.children.append(children[-1])
        outcomes: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()

        def bring_up(child: Child) -> None:
            try:
                ports = self._read_ready(child, ready_timeout_s)
                child.grpc_port, child.metrics_port = ports.get("grpc_port", 0), ports.get("metrics_port", -1)
                child.http_port, child.health_port = ports.get("http_port", 0), ports.get("health_port", -1)
                self._wait_healthy(child, ready_timeout_s)
                outcomes.put(None)
            except BaseException as e:  # handed to the caller's thread
                outcomes.put(e)

        for child in children:  # a thread each: every child's stdout is read while the others load
            threading.Thread(target=bring_up, args=(child,), name=f"up-{child.name}", daemon=True).start()
        for _ in children:
            if (error := outcomes.get()) is not None:
                raise error
        return children

    def _read_ready(self, child: Child, timeout_s: float) -> dict[str, int]:
        # Blocking readline is bounded by the child: it either prints the line or exits (EOF).
        deadline = time.monotonic() + timeout_s
        assert child.process.stdout is not None
        for line in child.process.stdout:
            if line.startswith(READY_PREFIX):
                return json.loads(line[len(READY_PREFIX):])
            sys.stdout.write(line)
            if time.monotonic() > deadline:
                break
        # At end of output the child is exiting but may not have exited yet: its code is worth a moment's wait.
        try:
            code = child.process.wait(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            code = None
        raise StartFailed(f"{child.name} did not become ready" + (f" (exit code {code})" if code is not None else "")
                          + "; its log above says why")

    def _wait_healthy(self, child: Child, timeout_s: float) -> None:
        if child.http_port:
            return self._wait_http_healthy(child, timeout_s)
        with grpc.insecure_channel(child.health_target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
        raise StartFailed(f"{child.name} never reported SERVING on {child.health_target}")

    def wait(self, health_every_s: float = 2.0, restart: bool = False) -> int:
        """Blocks until a signal; returns the exit code for `omnimesh up`. A child that exits or reports NOT_SERVING
        (a stage whose compute failed for good says so on its health service and in its log) is started again on
        its ports after a backoff doubling from 1 s, as Kubernetes would; without `restart` it stops the mesh."""
        stop = {"signal": None}

        def on_signal(signum: int, _frame: object) -> None:
            stop["signal"] = signum

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._watch_children(stop, health_every_s, restart)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _watch_children(self, stop: dict, health_every_s: float, restart: bool) -> int:
        next_health = time.monotonic() + health_every_s
        while stop["signal"] is None:
            for child in self.children:
                code = child.process.poll()
                if code is not None and child.restart_at is None:
                    if not restart:
                        log.error("%s exited with code %s; stopping the mesh", child.name, code)
                        self.stop_all()
                        return 1
                    self._schedule_restart(child, f"exited with code {code}")
                if child.restart_at is not None and time.monotonic() >= child.restart_at:
                    self._restart(child)
            if time.monotonic() >= next_health:
                sick = next((c for c in self.children if c.restart_at is None and self._not_serving(c)), None)
                if sick is not None and not restart:
                    log.error("%s reports NOT_SERVING (its log says why); stopping the mesh", sick.name)
                    self.stop_all()
                    return 1
                if sick is not None:
                    self._stop(sick)
                    self._schedule_restart(sick, "reported NOT_SERVING (its log says why)")
                next_health = time.monotonic() + health_every_s
            time.sleep(0.2)
        log.info("signal %s: stopping the mesh", stop["signal"])
        self.stop_all()
        return 0

    def _schedule_restart(self, child: Child, why: str) -> None:
        delay = min(MAX_BACKOFF_S, 2.0 ** child.restarts)
        log.error("%s %s; starting it again in %.0f s (restart %d)", child.name, why, delay, child.restarts + 1)
        child.restart_at = time.monotonic() + delay

    def _restart(self, child: Child, ready_timeout_s: float = 900.0) -> None:
        """Starts it again on its ports; it comes up on a thread while the others are watched. A start that fails
        ends its process, which the watch sees as the next failure."""
        child.restarts += 1
        child.restart_at = None
        child.process = subprocess.Popen(child.pinned_command(), stdout=subprocess.PIPE, text=True)

        def bring_up() -> None:
            try:
                self._read_ready(child, ready_timeout_s)
                self._wait_healthy(child, ready_timeout_s)
                log.info("%s is back (restart %d)", child.name, child.restarts)
            except StartFailed as err:
                log.error("%s", err)
                if child.process.poll() is None:
                    child.process.kill()

        threading.Thread(target=bring_up, name=f"restart-{child.name}", daemon=True).start()

    @staticmethod
    def _stop(child: Child, grace_s: float = 30.0) -> None:
        child.process.send_signal(signal.SIGTERM)
        try:
            child.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()

    def _wait_http_healthy(self, child: Child, timeout_s: float) -> None:
        url = f"http://{target(child.host, child.http_port)}/health"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise StartFailed(f"{child.name} never answered {url}")

    def _not_serving(self, child: Child) -> bool:
        """True only for an answer of NOT_SERVING: a child too busy to answer in time is not judged on that."""
        if child.http_port:
            return False  # stateless: it fails by exiting, which the watch loop sees
        with grpc.insecure_channel(child.health_target) as channel:
            try:
                status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                                    timeout=2).status
            except grpc.RpcError:
                return False
        return status == health_pb2.HealthCheckResponse.NOT_SERVING

    def stop_all(self, grace_s: float = 30.0) -> None:
        """SIGTERM to every child (gateway first, so it drains before the stages go), then SIGKILL stragglers."""
        for child in reversed(self.children):
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in reversed(self.children):
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0f s; killing it", child.name, grace_s)
                child.process.kill()
                child.process.wait()


def write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2))
