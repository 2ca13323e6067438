"""The device a stage serves on, made the process's current device, and the CPU threads its torch ops may use."""
from __future__ import annotations

import os

import torch

# torch's thread count before any stage set it (the physical cores, or OMP_NUM_THREADS): the CPU default is taken
# from this, so building a stage twice in one process does not take a core off twice
TORCH_DEFAULT_THREADS = torch.get_num_threads()


def stage_device(name: str, cpu_threads: int = 0) -> torch.device:
    """torch.device(name); a CUDA device also becomes the process's current device: Triton launches, CUDA graph
    captures and side streams use the current device, not their tensors' (a talker on cuda:1 failed its first
    Triton launch while cuda:0 was current).

    `cpu_threads` caps torch's CPU threads before any engine thread starts. 0 picks a default:
    - on CUDA, one. A GPU stage's CPU work is launches and small copies, but each of its threads that runs a CPU op
      over more than ~32k elements gets an OpenMP team as large as the machine, whose threads spin between ops: the
      talker on a 32-core H200 host burned 10 cores at one request and 25 at eight, and with one thread made 114
      audio-s/s at eight requests against 100 (bench/talker/NOTES.md, 2026-11-30 fourth session).
    - on CPU, all of torch's default threads but one, unless OMP_NUM_THREADS set that default. The spare core keeps
      this process's own server threads, and the gateway and the other stages of a mesh on one host, from stalling
      the model's OpenMP team: with two threads on two cores, the demo thinker streamed 1.5x slower at c = 1 and
      1.7x slower at c = 32 than with one (bench/http/NOTES.md, 2026-12-06)."""
    device = torch.device(name)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    if cpu_threads or device.type == "cuda":
        torch.set_num_threads(cpu_threads or 1)
    elif not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(max(1, TORCH_DEFAULT_THREADS - 1))
    return device


def is_device_fault(err: BaseException) -> bool:
    """An error the accelerator raised (torch.AcceleratorError: "CUDA error: an illegal memory access ...", a lost
    device). Such errors usually stay with the CUDA context, so every later call fails as well: the stage must be
    restarted, not retried. Running out of memory is not one (torch.OutOfMemoryError is its own type)."""
    return isinstance(err, torch.AcceleratorError)
