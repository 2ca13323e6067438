"""Host-to-device copies that never block the host: pinned staging for CUDA, a plain move elsewhere."""
from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`tensor` on `device` (cast to `dtype` there); a CPU tensor bound for CUDA goes through pinned memory."""
    if tensor.device.type == "cpu" and device.type == "cuda":
        tensor = tensor.pin_memory()  # a pageable source would make the copy synchronous
    tensor = tensor.to(device, non_blocking=True)
    return tensor if dtype is None else tensor.to(dtype)
