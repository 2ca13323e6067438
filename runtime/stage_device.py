"""The device a stage serves on, made the process's current device, and the CPU threads its torch ops may use."""
from __future__ import annotations

import torch


def stage_device(name: str, cpu_threads: int = 0) -> torch.device:
    """torch.device(name); a CUDA device also becomes the process's current device: Triton launches, CUDA graph
    captures and side streams use the current device, not their tensors' (a talker on cuda:1 failed its first
    Triton launch while cuda:0 was current).

    `cpu_threads` (0: one on CUDA, torch's default on CPU) caps torch's CPU threads before any engine thread starts.
    A GPU stage's CPU work is launches and small copies, but each of its threads that runs a CPU op over more than
    ~32k elements gets an OpenMP team as large as the machine, whose threads spin between ops: the talker on a
    32-core H200 host burned 10 cores at one request and 25 at eight, and with one thread made 114 audio-s/s at
    eight requests against 100 (bench/talker/NOTES.md, 2026-11-30 fourth session)."""
    device = torch.device(name)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    if cpu_threads or device.type == "cuda":
        torch.set_num_threads(cpu_threads or 1)
    return device


def is_device_fault(err: BaseException) -> bool:
    """An error the accelerator raised (torch.AcceleratorError: "CUDA error: an illegal memory access ...", a lost
    device). Such errors usually stay with the CUDA context, so every later call fails as well: the stage must be
    restarted, not retried. Running out of memory is not one (torch.OutOfMemoryError is its own type)."""
    return isinstance(err, torch.AcceleratorError)
