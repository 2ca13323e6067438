"""The Talker's KV cache: one fixed run of paged blocks per row slot, so no block manager is needed.

Each layer holds `[2, num_slots * blocks_per_slot, block_size, kv_heads, head_dim]` (the runtime's paged layout):
slot s owns blocks `s * blocks_per_slot ...` in order, so its block table is a fixed arange and the GPU step can
use the runtime's paged decode-attention kernel with tables built on the device. The eager reference loop reads
and writes the same storage through `write` / `read`. One extra slot past `num_slots` is scratch: the padding rows
of a CUDA-graph batch bucket write there and nobody reads it.
"""
from __future__ import annotations

import torch

BLOCK_SIZE = 16


class KVPool:
    """Per-layer paged K/V storage with one slot per running sequence (see the module docstring)."""

    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        capacity: int,
        kv_heads: int,
        head_dim: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.blocks_per_slot = -(-capacity // BLOCK_SIZE)
        self.capacity = capacity  # positions a row may use; its slot is rounded up to whole blocks
        self.slot_stride = self.blocks_per_slot * BLOCK_SIZE
        self.num_slots = num_slots
        self.scratch_slot = num_slots
        shape = (2, (num_slots + 1) * self.blocks_per_slot, BLOCK_SIZE, kv_heads, head_dim)
        self.layers = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.free_slots = list(range(num_slots - 1, -1, -1))

    def allocate(self) -> int:
        if not self.free_slots:
            raise RuntimeError("KVPool is full: size it for the number of concurrent rows")
        return self.free_slots.pop()

    def release(self, slot: int) -> None:
        self.free_slots.append(slot)

    def check_capacity(self, end: int) -> None:
        if end > self.capacity:
            raise RuntimeError(f"KVPool capacity {self.capacity} < {end} positions; size it for prompt + max frames")

    def _flat(self, layer: int) -> torch.Tensor:
        """[2, slots * slot_stride, kv_heads, head_dim]: position p of slot s is row s * slot_stride + p."""
        two, blocks, size, heads, dim = self.layers[layer].shape
        return self.layers[layer].view(two, blocks * size, heads, dim)

    def write(self, layer: int, slots: torch.Tensor, start: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new k/v `(B, KVH, T, D)` of row b at positions `start[b] .. start[b]+T-1` of slot `slots[b]`."""
        steps = k.shape[2]
        rows = (slots[:, None] * self.slot_stride + start[:, None] + torch.arange(steps, device=start.device)).flatten()
        flat = self._flat(layer)
        flat[0].index_copy_(0, rows, k.transpose(1, 2).flatten(0, 1).to(flat.dtype))  # (B*T, KVH, D)
        flat[1].index_copy_(0, rows, v.transpose(1, 2).flatten(0, 1).to(flat.dtype))

    def read(self, layer: int, slots: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` cached positions of each row's slot, `(B, KVH, length, D)` each."""
        flat = self._flat(layer)
        by_slot = flat.view(2, self.num_slots + 1, self.slot_stride, *flat.shape[2:])
        return by_slot[0, slots, :length].transpose(1, 2), by_slot[1, slots, :length].transpose(1, 2)

    def block_tables(self, slots: torch.Tensor) -> torch.Tensor:
        """int32 `(B, blocks_per_slot)`: each slot's fixed run of blocks, built on the slots' device (no sync)."""
        first = slots.to(torch.int32)[:, None] * self.blocks_per_slot
        return first + torch.arange(self.blocks_per_slot, dtype=torch.int32, device=slots.device)


def causal_mask(start: torch.Tensor, steps: int, length: int) -> torch.Tensor:
    """Bool `(B, 1, T, S)`: query i of row b (at position start[b]+i) sees keys 0..start[b]+i."""
    query_pos = start[:, None] + torch.arange(steps, device=start.device)  # (B, T)
    key_pos = torch.arange(length, device=start.device)
    return (key_pos[None, None, :] <= query_pos[:, :, None]).unsqueeze(1)
