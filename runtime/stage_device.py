"""The device a stage serves on, made the process's current device."""
from __future__ import annotations

import torch


def stage_device(name: str) -> torch.device:
    """torch.device(name); a CUDA device also becomes the process's current device: Triton launches, CUDA graph
    captures and side streams use the current device, not their tensors' (a talker on cuda:1 failed its first
    Triton launch while cuda:0 was current)."""
    device = torch.device(name)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    return device
