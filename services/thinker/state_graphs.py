"""The state-slot inputs of a hybrid model's decode graphs: each bucket's rows read and advance the slots held in one
static device buffer (filled before each replay), so a captured graph serves whichever sequences run; padding rows
advance a scratch slot no sequence holds. Prefill steps (row-by-row chunked delta rule) run eagerly."""
from __future__ import annotations

import torch

from runtime.transfer import to_device
from services.thinker.model.linear_state import LinearStateCache, StateContext


class DecodeStateInputs:
    def __init__(self, cache: LinearStateCache, buckets: tuple[int, ...], scratch_slot: int,
                 device: torch.device) -> None:
        self.scratch_slot = scratch_slot
        self.slots = torch.full((max(buckets),), scratch_slot, dtype=torch.long, device=device)  # int64 [max B]
        none = torch.empty(0, dtype=torch.long, device=device)
        self.contexts = {b: StateContext(cache, torch.arange(b, device=device), self.slots[:b], [], none)
                         for b in buckets}

    def context(self, num_rows: int) -> StateContext:
        """The static StateContext of the decode graph of `num_rows` rows (one token each)."""
        return self.contexts[num_rows]

    def fill(self, slots: list[int]) -> None:
        """This step's rows' slots, then the scratch slot for every padding row."""
        padded = slots + [self.scratch_slot] * (self.slots.shape[0] - len(slots))
        self.slots.copy_(to_device(torch.tensor(padded, dtype=torch.long), self.slots.device))
