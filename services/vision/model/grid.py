"""`Grid`: one image or video in patch units, the unit every host-side plan is built from."""
from __future__ import annotations

from typing import NamedTuple


class Grid(NamedTuple):
    """Temporal patches, patch rows and patch columns of one item (an image has t == 1)."""

    t: int
    h: int
    w: int

    @property
    def num_patches(self) -> int:
        return self.t * self.h * self.w

    def num_tokens(self, merge_size: int) -> int:
        """LLM tokens this item becomes after the `merge_size`×`merge_size` merger."""
        return self.num_patches // (merge_size * merge_size)
