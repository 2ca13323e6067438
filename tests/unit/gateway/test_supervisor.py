"""The supervisor starts processes together and gives up on the first that fails, without waiting for the rest."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from gateway.cli.supervisor import Child, Supervisor


def test_a_child_that_dies_fails_the_start_while_another_still_loads() -> None:
    sup = Supervisor("127.0.0.1")
    # a child that never prints its ready line (it sleeps) beside one that exits at once
    slow = ("slow", "timeit", ["-n", "1", "import time; time.sleep(60)"])
    dead = ("dead", "omnimesh_no_such_module", [])
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"dead did not become ready \(exit code 1\)"):
            sup.start_together([slow, dead], ready_timeout_s=30)
        assert time.monotonic() - t0 < 20  # did not wait for the slow one
        assert [c.name for c in sup.children] == ["slow", "dead"]
        assert sup.children[0].process.poll() is None  # still loading: the caller's stop_all ends it
    finally:
        sup.stop_all(grace_s=5)
    assert all(c.process.poll() is not None for c in sup.children)


def test_a_child_that_reports_not_serving_stops_the_mesh() -> None:
    sup = Supervisor("127.0.0.1")
    child = "tests.unit.gateway.health_flip_child"
    try:
        sup.start_together([("steady", child, ["60"]), ("sick", child, ["1.0"])], ready_timeout_s=30)
        t0 = time.monotonic()
        assert sup.wait(health_every_s=0.5) == 1
        assert time.monotonic() - t0 < 10
    finally:
        sup.stop_all(grace_s=5)
    assert all(c.process.poll() is not None for c in sup.children)  # both stopped, the steady one too


def test_a_child_that_exits_stops_the_mesh() -> None:
    sup = Supervisor("127.0.0.1")
    child = "tests.unit.gateway.health_flip_child"
    try:
        sup.start_together([("steady", child, ["60"]), ("crashing", child, ["1.0", "exit"])], ready_timeout_s=30)
        assert sup.wait(health_every_s=30) == 1  # the exit, not a health check, ends it
    finally:
        sup.stop_all(grace_s=5)
    assert [c.process.returncode for c in sup.children][1] == 3
    assert sup.children[0].process.poll() is not None


def stop_in(seconds: float) -> threading.Timer:
    """SIGTERM to this process later: `wait` returns on it (it runs on the main thread, as signal handlers must)."""
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    return timer


def test_a_child_that_exits_is_started_again_on_its_port_with_backoff() -> None:
    sup = Supervisor("127.0.0.1")
    child = "tests.unit.gateway.health_flip_child"
    try:
        steady, crashing = sup.start_together([("steady", child, ["60"]), ("crashing", child, ["1.0", "exit"])],
                                              ready_timeout_s=30)
        steady_pid, port = steady.process.pid, crashing.grpc_port
        stop_in(7.0)
        assert sup.wait(health_every_s=30, restart=True) == 0  # the signal, not the crash, ends it
        assert crashing.restarts >= 2  # exits at 1 s, back after 1 s, exits again, back after 2 s
        assert crashing.grpc_port == port and f"--port {port}" in " ".join(crashing.pinned_command())
        assert steady.process.pid == steady_pid and steady.restarts == 0
    finally:
        sup.stop_all(grace_s=5)
    assert all(c.process.poll() is not None for c in sup.children)


def test_a_child_that_reports_not_serving_is_stopped_and_started_again() -> None:
    sup = Supervisor("127.0.0.1")
    child = "tests.unit.gateway.health_flip_child"
    try:
        (sick,) = sup.start_together([("sick", child, ["1.0"])], ready_timeout_s=30)
        first_pid = sick.process.pid
        stop_in(6.0)
        assert sup.wait(health_every_s=0.5, restart=True) == 0
        assert sick.restarts >= 1 and sick.process.pid != first_pid
    finally:
        sup.stop_all(grace_s=5)


def test_a_child_with_a_health_port_is_probed_there_and_keeps_it_on_restart() -> None:
    """Gateway replicas share their gRPC port, which answers for whichever the kernel picks: each is probed on its
    own health port instead."""
    child = Child("gateway-1", None, "127.0.0.1", grpc_port=50051,  # type: ignore[arg-type]
                  metrics_port=9101, health_port=9201, command=["python", "-m", "gateway"])
    assert child.health_target == "127.0.0.1:9201"
    assert child.pinned_command()[-6:] == ["--port", "50051", "--metrics-port", "9101", "--health-port", "9201"]
    alone = Child("thinker", None, "127.0.0.1", grpc_port=50052)  # type: ignore[arg-type]
    assert alone.health_target == "127.0.0.1:50052" and "--health-port" not in alone.pinned_command()
