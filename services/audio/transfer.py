"""Host-to-device copies that never block the host: pinned staging for CUDA, one copy per dtype of many tensors."""
from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`tensor` on `device` (cast to `dtype` there); a CPU tensor bound for CUDA goes through pinned memory."""
    if tensor.device.type == "cpu" and device.type == "cuda":
        tensor = tensor.pin_memory()  # a pageable source would make the copy synchronous
    tensor = tensor.to(device, non_blocking=True)
    return tensor if dtype is None else tensor.to(dtype)


def to_device_many(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """The same tensors on `device`, moved with one copy per dtype (a plan has dozens of small index tensors and
    each copy costs a launch); results are views of one buffer per dtype."""
    moved: list[torch.Tensor | None] = [None] * len(tensors)
    for dtype in {t.dtype for t in tensors}:
        group = [i for i, t in enumerate(tensors) if t.dtype == dtype]
        flat = to_device(torch.cat([tensors[i].reshape(-1) for i in group]), device)
        for i, part in zip(group, flat.split([tensors[i].numel() for i in group])):
            moved[i] = part.view(tensors[i].shape)
    return moved  # type: ignore[return-value]
