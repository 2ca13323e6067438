"""A slot-per-sequence KV cache for the Talker's reference loop: one contiguous slab per layer, rows of any length."""
from __future__ import annotations

import torch


class KVPool:
    """K/V slabs `(num_slots, kv_heads, capacity, head_dim)` per layer; each running sequence owns one slot.

    The engine replaces this with a paged cache; this one keeps the reference loop exact and simple: a step
    writes each row's new keys at its own offset and reads the first `max(length)` positions of every row,
    masking what lies past a row's own length.
    """

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
        shape = (num_slots, kv_heads, capacity, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.capacity = capacity
        self.free_slots = list(range(num_slots - 1, -1, -1))

    def allocate(self) -> int:
        if not self.free_slots:
            raise RuntimeError("KVPool is full: size it for the number of concurrent rows")
        return self.free_slots.pop()

    def release(self, slot: int) -> None:
        self.free_slots.append(slot)

    def write(self, layer: int, slots: torch.Tensor, start: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new k/v `(B, KVH, T, D)` of row b at positions `start[b] .. start[b]+T-1` of slot `slots[b]`."""
        steps = k.shape[2]
        pos = start[:, None] + torch.arange(steps, device=start.device)  # (B, T)
        # advanced indices on dims 0 and 2 put (B, T) first: the target view is (B, T, KVH, D)
        self.k[layer][slots[:, None], :, pos] = k.transpose(1, 2)
        self.v[layer][slots[:, None], :, pos] = v.transpose(1, 2)

    def check_capacity(self, end: int) -> None:
        if end > self.capacity:
            raise RuntimeError(f"KVPool capacity {self.capacity} < {end} positions; size it for prompt + max frames")

    def read(self, layer: int, slots: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` cached positions of each row's slot, `(B, KVH, length, D)` each."""
        return self.k[layer][slots, :, :length], self.v[layer][slots, :, :length]


def causal_mask(start: torch.Tensor, steps: int, length: int) -> torch.Tensor:
    """Bool `(B, 1, T, S)`: query i of row b (at position start[b]+i) sees keys 0..start[b]+i."""
    query_pos = start[:, None] + torch.arange(steps, device=start.device)  # (B, T)
    key_pos = torch.arange(length, device=start.device)
    return (key_pos[None, None, :] <= query_pos[:, :, None]).unsqueeze(1)
