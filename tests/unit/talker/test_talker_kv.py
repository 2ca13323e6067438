"""KVPool: rows at different offsets, masks per row, and the capacity and slot limits."""
from __future__ import annotations

import pytest
import torch

from services.talker.model.kv import KVPool, causal_mask


def test_rows_write_and_read_at_their_own_offsets() -> None:
    pool = KVPool(num_layers=1, num_slots=3, capacity=8, kv_heads=1, head_dim=2)
    slots, start = torch.tensor([2, 0]), torch.tensor([3, 0])
    k = torch.arange(8.0).view(2, 1, 2, 2)  # (B, KVH, T, D)
    pool.write(0, slots, start, k, -k)
    keys, values = pool.read(0, slots, 5)
    assert torch.equal(keys[0, 0, 3:5], k[0, 0]) and torch.equal(keys[1, 0, 0:2], k[1, 0])
    assert torch.equal(values, -keys)


def test_mask_is_causal_per_row() -> None:
    mask = causal_mask(torch.tensor([2, 0]), steps=2, length=4)
    assert mask[0, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    assert mask[1, 0].tolist() == [[True, False, False, False], [True, True, False, False]]


def test_limits() -> None:
    pool = KVPool(1, 1, 4, 1, 2)
    pool.allocate()
    with pytest.raises(RuntimeError, match="KVPool is full"):
        pool.allocate()
    with pytest.raises(RuntimeError, match="capacity 4 < 5"):
        pool.check_capacity(5)
