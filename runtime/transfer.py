"""Copies between host and device that never block the host: pinned staging on CUDA.

A copy from pageable host memory makes the CUDA stream finish everything queued before it (with an engine running a
step ahead, that is the step in flight), and a copy to pageable memory waits for the whole stream; through pinned
memory both are queued like any kernel.
"""
from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`tensor` on `device` (cast to `dtype` there); a CPU tensor bound for CUDA goes through pinned memory."""
    if tensor.device.type == "cpu" and device.type == "cuda":
        tensor = tensor.pin_memory()
    tensor = tensor.to(device, non_blocking=True)
    return tensor if dtype is None else tensor.to(dtype)


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A CUDA tensor's copy into new pinned host memory, queued on the current stream (read it after an event
    recorded behind it); a CPU tensor as it is."""
    if tensor.device.type != "cuda":
        return tensor
    return torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True).copy_(tensor, non_blocking=True)
