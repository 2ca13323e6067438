"""StagedTensors: one buffer per dtype, views in list order, refilled in place (what a CUDA graph keeps reading)."""
from __future__ import annotations

import pytest
import torch

from services.audio.transfer import StagedTensors, to_device_many


def test_views_share_one_buffer_per_dtype_and_refill_in_place() -> None:
    first = [torch.arange(6).view(2, 3), torch.ones(4, dtype=torch.bool), torch.tensor([7, 8])]
    staged = StagedTensors(first, torch.device("cpu"))
    assert set(staged.buffers) == {torch.int64, torch.bool} and staged.buffers[torch.int64].numel() == 8
    views = staged.views
    staged.refill([torch.full((2, 3), 5), torch.zeros(4, dtype=torch.bool), torch.tensor([1, 2])])
    assert staged.views is views
    assert views[0].tolist() == [[5] * 3] * 2 and not views[1].any() and views[2].tolist() == [1, 2]


def test_refill_refuses_other_shapes() -> None:
    staged = StagedTensors([torch.zeros(3)], torch.device("cpu"))
    with pytest.raises(ValueError, match="shapes and dtypes"):
        staged.refill([torch.zeros(4)])


def test_to_device_many_keeps_values() -> None:
    tensors = [torch.tensor([1.5, 2.5]), torch.tensor([3], dtype=torch.int32)]
    moved = to_device_many(tensors, torch.device("cpu"))
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(moved, tensors))
