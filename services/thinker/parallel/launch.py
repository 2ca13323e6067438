"""Starts a tensor-parallel thinker from the stage config: checks the split against the checkpoint before any
process starts, lays the ranks on devices, starts the workers and loads rank 0's shard beside theirs."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from services.thinker.model.config import ThinkerConfig
from services.thinker.parallel.driver import RankDriver
from services.thinker.parallel.plan import plan_rank
from services.thinker.parallel.rank_model import ShardedLM, load_rank_model
from services.thinker.parallel.worker import WorkerSpec

log = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 1200.0  # a rank loading its shard of a 30B checkpoint (the chart's thinker startupSeconds)
LOOPBACK = "127.0.0.1"  # the ranks of one pod share a host


def rank_devices(device: torch.device, world: int) -> list[torch.device]:
    """Rank r's device: cpu for every rank on CPU, else the next GPUs after rank 0's (cuda:k .. cuda:k+N-1)."""
    if device.type != "cuda":
        return [device] * world
    first = device.index or 0
    return [torch.device("cuda", first + r) for r in range(world)]


def load_parallel_thinker(ckpt_dir: Path | str, world: int, device: torch.device, dtype: torch.dtype,
                          cpu_threads: int, timeout_s: float, use_kernels: bool | None = None) -> ShardedLM:
    """Rank 0's shard with its driver attached (model.driver; close it to stop the workers). `timeout_s` bounds
    every collective: a rank that hangs or dies fails the others' step instead of blocking it."""
    plan = plan_rank(ThinkerConfig.from_checkpoint(ckpt_dir), 0, world)  # a bad split fails here, naming the field
    devices = rank_devices(device, world)
    if device.type == "cuda" and devices[-1].index >= torch.cuda.device_count():
        raise ValueError(f"thinker.tensor_parallel={world} from {device} needs cuda:{devices[-1].index}, but "
                         f"{torch.cuda.device_count()} GPUs are visible")
    if device.type == "cpu" and not cpu_threads:  # N ranks on one CPU: each its share of the cores, not all of them
        cpu_threads = max(1, (os.cpu_count() or 1) // world)
        torch.set_num_threads(cpu_threads)
    spec = WorkerSpec(Path(ckpt_dir), 0, world, LOOPBACK, 0, str(device), str(dtype).removeprefix("torch."),
                      cpu_threads, timeout_s, LOAD_TIMEOUT_S, use_kernels)
    driver = RankDriver.start(spec, devices)
    try:
        model = load_rank_model(ckpt_dir, plan, driver.group, device, dtype, use_kernels)
        driver.join()
    except BaseException:
        driver.close()
        raise
    model.driver = driver
    log.info("thinker: tensor parallel over %d ranks on %s (workers: pids %s)", world, ", ".join(map(str, devices)),
             ", ".join(str(proc.pid) for proc, _ in driver.workers))
    return model
