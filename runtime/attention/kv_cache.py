"""Paged KV cache storage: allocation and writing new tokens' keys and values at their slots."""
from __future__ import annotations

import torch

K, V = 0, 1  # index of keys and values in a layer's cache tensor


def allocate_kv_cache(
    num_layers: int,
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> list[torch.Tensor]:
    """One zeroed tensor per layer, each [2, num_blocks, block_size, num_kv_heads, head_dim] (keys, values)."""
    for name, value in (("num_layers", num_layers), ("num_blocks", num_blocks), ("block_size", block_size),
                        ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        if value <= 0:
            raise ValueError(f"allocate_kv_cache: {name} must be positive, got {value}")
    shape = (2, num_blocks, block_size, num_kv_heads, head_dim)
    return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]


def flat_slots(kv_cache: torch.Tensor) -> torch.Tensor:
    """A view of one layer's cache with blocks flattened to slots: [2, num_blocks * block_size, Hkv, D]."""
    two, num_blocks, block_size, num_kv_heads, head_dim = kv_cache.shape
    return kv_cache.view(two, num_blocks * block_size, num_kv_heads, head_dim)


def write_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store this step's keys and values ([T, Hkv, D]) at their flat slots ([T]), in place."""
    slots = flat_slots(kv_cache)
    slots[K].index_copy_(0, slot_mapping, k.to(kv_cache.dtype))
    slots[V].index_copy_(0, slot_mapping, v.to(kv_cache.dtype))
