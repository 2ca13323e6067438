"""Rank 0's state slots of a tensor-parallel hybrid model: every rank holds its own heads' share of each slot (conv
channels and recurrent state of its Gated-DeltaNet heads) under the same slot ids, so each change rank 0 makes to
its slots outside a forward (zeroing a starting sequence's, copying prefix-cache snapshots) is repeated on the
workers, in order with the steps. The runner, scheduler and prefix cache stay unaware of the ranks."""
from __future__ import annotations

from collections.abc import Callable

import torch

from services.thinker.model.hybrid_config import HybridConfig
from services.thinker.model.linear_state import LinearStateCache
from services.thinker.parallel.collectives import RankGroup
from services.thinker.parallel.messages import StateCopy, StateReset


class MirroredStateCache(LinearStateCache):
    def __init__(self, cfg: HybridConfig, num_slots: int, dtype: torch.dtype, device: torch.device | str,
                 announce: Callable[[object], bool], group: RankGroup) -> None:
        """announce: sends a message to the workers and says whether it did (rank 0 outside warm-ups)."""
        super().__init__(cfg, num_slots, dtype, device)
        self._announce = announce
        self._group = group

    def copy(self, src: list[int], dst: list[int]) -> None:
        self._announce(StateCopy(list(src), list(dst)))  # host lists already: no device read
        super().copy(src, dst)

    def reset(self, slots: torch.Tensor) -> None:
        """The slot ids are on the device already: they follow through the group (no device-to-host read)."""
        if self._announce(StateReset(slots.shape[0])):
            self._group.broadcast(slots)
        super().reset(slots)


def apply_reset(cache: LinearStateCache, msg: StateReset, group: RankGroup, device: torch.device) -> None:
    """A worker's side of MirroredStateCache.reset."""
    slots = torch.empty(msg.count, dtype=torch.long, device=device)
    cache.reset(group.broadcast(slots))
