"""The tensor-parallel group's two collectives, over torch.distributed's default process group (gloo on CPU, NCCL
on CUDA): the all-reduce that sums each row-parallel output, and the broadcast of rank 0's step inputs. Both are
plain c10d calls, so a CUDA graph captured around a forward records them too."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class RankGroup:
    rank: int
    world: int

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sums `t` over the ranks, in place; every rank gets the same bits."""
        dist.all_reduce(t)
        return t

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """Rank 0's `t` into every rank's `t` (contiguous, same shape and dtype), in place."""
        dist.broadcast(t, src=0)
        return t


def host_store(host: str, world: int, timeout_s: float) -> dist.TCPStore:
    """Rank 0's TCP store on a free port (the OS picks it: `store.port`); the workers join through it."""
    return dist.TCPStore(host, 0, world, is_master=True, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)


def worker_store(host: str, port: int, world: int, timeout_s: float) -> dist.TCPStore:
    return dist.TCPStore(host, port, world, is_master=False, timeout=timedelta(seconds=timeout_s))


def join_group(store: dist.TCPStore, rank: int, world: int, device: torch.device, timeout_s: float) -> None:
    """Joins the default process group. Every rank joins once all have loaded their shards, so the join waits only
    for the others' arrival; `timeout_s` then bounds it and every collective: a rank that died or hangs makes
    the others raise instead of waiting for ever."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s),
                            device_id=device if device.type == "cuda" else None)


def leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
