"""Rank 0's driver never waits for ever on a worker: one that cannot start, one that is slow to load its shard and
one that ends are each reported as RankFailed naming the rank; close leaves no worker behind, killing one that
outstays Stop."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from services.thinker.parallel import driver as driver_module
from services.thinker.parallel.driver import RankDriver, RankFailed
from services.thinker.parallel.launch import LOOPBACK
from services.thinker.parallel.messages import Stop
from services.thinker.parallel.worker import WorkerSpec

CPU = torch.device("cpu")


def _spec(ckpt: Path, **changes: object) -> WorkerSpec:
    spec = WorkerSpec(ckpt, 0, 2, LOOPBACK, 0, "cpu", "float32", 1, timeout_s=30, load_timeout_s=60,
                      use_kernels=None)
    return replace(spec, **changes)


def _started(spec: WorkerSpec, devices: list[torch.device]) -> RankDriver:
    driver = RankDriver.start(spec, devices)
    driver.join()
    return driver


def test_a_worker_that_cannot_start_is_reported_with_its_error(demo_ckpt: Path) -> None:
    driver = RankDriver.start(_spec(demo_ckpt), [CPU, torch.device("cuda", 7)])  # no such device here
    try:
        with pytest.raises(RankFailed, match=r"(?s)tensor-parallel rank 1 failed to start:.*Traceback"):
            driver.join()
    finally:
        driver.close()


def test_a_worker_slower_than_the_load_timeout_is_reported(demo_ckpt: Path) -> None:
    driver = RankDriver.start(_spec(demo_ckpt, load_timeout_s=0.5), [CPU, CPU])
    try:
        with pytest.raises(RankFailed, match="tensor-parallel rank 1 did not load its shard in 0 s"):
            driver.join()
    finally:
        driver.close()


def test_a_worker_that_ends_fails_the_next_send_and_close_leaves_none(demo_ckpt: Path) -> None:
    driver = _started(_spec(demo_ckpt), [CPU, CPU])
    try:
        assert driver.failure is None
        driver.send("not a message")  # the worker refuses it and exits
        (proc, _), = driver.workers
        proc.join(30)
        with pytest.raises(RankFailed, match=r"tensor-parallel rank 1 \(pid \d+\) exited with code 1"):
            driver.send(Stop())
    finally:
        driver.close()
    assert not proc.is_alive()


def test_close_stops_a_healthy_worker_at_once(demo_ckpt: Path) -> None:
    driver = _started(_spec(demo_ckpt), [CPU, CPU])
    (proc, _), = driver.workers
    t0 = time.monotonic()
    driver.close()
    assert not proc.is_alive() and proc.exitcode == 0 and time.monotonic() - t0 < 5


def test_close_kills_a_worker_that_outstays_stop(demo_ckpt: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(driver_module, "STOP_WAIT_S", 0.5)
    driver = _started(_spec(demo_ckpt), [CPU, CPU])
    (proc, _), = driver.workers
    os.kill(proc.pid, signal.SIGSTOP)  # answers nothing, as a hung worker
    driver.close()
    assert not proc.is_alive() and proc.exitcode == -signal.SIGKILL
    assert "outstayed Stop; killing it" in caplog.text
