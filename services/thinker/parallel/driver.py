"""Rank 0's side of the tensor-parallel group: starts the worker processes (spawn), joins the group with them,
tells them each step, notices one that died, and stops them."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from multiprocessing.connection import Connection

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from services.thinker.parallel.collectives import RankGroup, host_store, join_group, leave_group
from services.thinker.parallel.messages import Failed, Ready, Stop
from services.thinker.parallel.worker import WorkerSpec, run_worker

log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0  # a worker not gone this long after Stop is killed


class RankFailed(RuntimeError):
    """A worker process died or failed to start: the thinker cannot step without it."""


class RankDriver:
    """Rank 0's handle on its workers: their processes and pipes, and the group once formed."""

    def __init__(self, workers: list[tuple[mp.Process, Connection]], store: dist.TCPStore, spec: WorkerSpec,
                 device: torch.device) -> None:
        self.workers = workers
        self.group = RankGroup(0, len(workers) + 1)
        self._store, self._spec, self._device = store, spec, device
        self._failure: RankFailed | None = None
        self._joined = False  # whether the group formed: before, a worker has no state worth a clean exit

    @classmethod
    def start(cls, spec: WorkerSpec, devices: list[torch.device]) -> RankDriver:
        """Spawns ranks 1..N-1 from `spec` (its rank and device replaced per worker), which load their shards
        while rank 0 loads its own; `join` then waits for them and forms the group."""
        world = len(devices)
        store = host_store(spec.host, world, spec.load_timeout_s)
        port = store.port
        ctx = mp.get_context("spawn")
        workers: list[tuple[mp.Process, Connection]] = []
        for rank in range(1, world):
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(target=run_worker, name=f"thinker-tp{rank}", daemon=True,
                               args=(replace(spec, rank=rank, port=port, device=str(devices[rank])), child_end))
            proc.start()
            child_end.close()
            workers.append((proc, parent_end))
        return cls(workers, store, spec, devices[0])

    def join(self) -> None:
        """Waits until every worker has loaded its shard (raising RankFailed naming one that did not), then forms
        the process group with them."""
        timeout_s = self._spec.load_timeout_s
        deadline = time.monotonic() + timeout_s
        for rank, (proc, conn) in enumerate(self.workers, start=1):
            while not conn.poll(0.2):
                self._check_alive()
                if time.monotonic() > deadline:
                    raise RankFailed(f"tensor-parallel rank {rank} did not load its shard in {timeout_s:.0f} s")
            msg = conn.recv()
            if isinstance(msg, Failed):
                raise RankFailed(f"tensor-parallel rank {rank} failed to start:\n{msg.error}")
            assert isinstance(msg, Ready), msg
        join_group(self._store, 0, self.group.world, self._device, self._spec.timeout_s)
        self._joined = True

    @property
    def failure(self) -> RankFailed | None:
        """The first worker found dead, or None; checked on every send and by the stage's health watch."""
        if self._failure is None:
            for rank, (proc, _) in enumerate(self.workers, start=1):
                if not proc.is_alive():
                    self._failure = RankFailed(f"tensor-parallel rank {rank} (pid {proc.pid}) exited with code "
                                               f"{proc.exitcode}")
                    break
        return self._failure

    def _check_alive(self) -> None:
        if (failure := self.failure) is not None:
            raise failure

    def send(self, msg: object) -> None:
        """One message to every worker; raises RankFailed when one is gone (its pipe, or its process)."""
        self._check_alive()
        try:
            for _, conn in self.workers:
                conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            self._check_alive()
            raise RankFailed(f"a tensor-parallel worker's pipe broke: {e}") from e

    def close(self) -> None:
        """Stops the workers (killing any that outstay STOP_WAIT_S, or at once when the group never formed: a
        worker past its load would wait in the rendezvous) and leaves the group."""
        for proc, conn in self.workers:
            if proc.is_alive() and not self._joined:
                proc.kill()
            elif proc.is_alive():
                try:
                    conn.send(Stop())
                except OSError:
                    pass
        deadline = time.monotonic() + STOP_WAIT_S
        for proc, conn in self.workers:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                log.warning("thinker: tensor-parallel worker %s outstayed Stop; killing it", proc.pid)
                proc.kill()
                proc.join()
            conn.close()
        leave_group()
