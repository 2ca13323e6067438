"""Host-to-device copies of many tensors that never block the host: one copy per dtype, pinned staging for CUDA."""
from __future__ import annotations

import torch

from runtime.transfer import to_device


def to_device_many(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """The same tensors on `device`, moved with one copy per dtype (a plan has dozens of small index tensors and
    each copy costs a launch); results are views of one buffer per dtype."""
    return StagedTensors(tensors, device).views


class StagedTensors:
    """Device copies of a list of host tensors, held as one flat buffer per dtype, that can be refilled in place
    from another list of the same shapes and dtypes (a CUDA graph keeps reading the same addresses)."""

    def __init__(self, tensors: list[torch.Tensor], device: torch.device) -> None:
        self.shapes = [t.shape for t in tensors]
        self.dtypes = [t.dtype for t in tensors]
        self.buffers = {dtype: to_device(flat, device) for dtype, flat in _flatten_by_dtype(tensors).items()}
        views: list[torch.Tensor | None] = [None] * len(tensors)
        for dtype, buffer in self.buffers.items():
            group = [i for i, d in enumerate(self.dtypes) if d == dtype]
            for i, part in zip(group, buffer.split([self.shapes[i].numel() for i in group])):
                views[i] = part.view(self.shapes[i])
        self.views: list[torch.Tensor] = views  # type: ignore[assignment]

    def refill(self, tensors: list[torch.Tensor]) -> None:
        """Copies `tensors` into the views, one non-blocking copy per dtype (the host allocator keeps each pinned
        source alive until its copy has run)."""
        if [t.shape for t in tensors] != self.shapes or [t.dtype for t in tensors] != self.dtypes:
            raise ValueError("refill needs tensors of the shapes and dtypes the buffers were made for")
        for dtype, flat in _flatten_by_dtype(tensors).items():
            buffer = self.buffers[dtype]
            if buffer.device.type == "cuda" and flat.device.type == "cpu":
                flat = flat.pin_memory()
            buffer.copy_(flat, non_blocking=True)


def _flatten_by_dtype(tensors: list[torch.Tensor]) -> dict[torch.dtype, torch.Tensor]:
    """One 1-D concatenation per dtype, each in list order."""
    out = {}
    for dtype in dict.fromkeys(t.dtype for t in tensors):
        out[dtype] = torch.cat([t.reshape(-1) for t in tensors if t.dtype == dtype])
    return out
