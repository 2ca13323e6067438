"""Fixed per-sequence state slots for hybrid models (Gated-DeltaNet conv and recurrent state), beside the paged KV
(pure Python: the tensors live with the runner, indexed by these ids).

Unlike KV, a sequence's linear-attention state does not grow with its length: it takes one slot when admitted and
holds it until it finishes, is aborted or is preempted (a preempted sequence recomputes from token 0 into a fresh
slot). With no slot free, admission waits, as it does for KV blocks.
"""
from __future__ import annotations

from runtime.engine.sequence import Sequence


class StateSlots:
    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots={num_slots}: a hybrid model needs at least one state slot")
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))  # popped from the end: slot 0 first

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, seq: Sequence) -> int:
        """Gives `seq` a slot (its own if it holds one already); call only while `num_free` > 0 or it holds one."""
        if seq.state_slot is None:
            if not self._free:
                raise RuntimeError(f"{seq} needs a state slot and none is free: check num_free first")
            seq.state_slot = self._free.pop()
        return seq.state_slot

    def free(self, seq: Sequence) -> None:
        if seq.state_slot is not None:
            self._free.append(seq.state_slot)
            seq.state_slot = None
