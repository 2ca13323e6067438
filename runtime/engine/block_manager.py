"""Paged KV cache bookkeeping: which blocks each sequence owns (pure Python)."""
from __future__ import annotations

from collections import deque

from runtime.engine.sequence import Sequence


class BlockManager:
    """A free list of fixed-size KV blocks. A sequence holds ceil(computed tokens / block_size) blocks."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks}: the KV cache needs at least one block")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage_ratio(self) -> float:
        return 1.0 - len(self._free) / self.num_blocks

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        total = -(-(seq.num_computed_tokens + num_new_tokens) // self.block_size)
        return max(0, total - len(seq.block_table))

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= len(self._free)

    def grow(self, seq: Sequence, num_new_tokens: int) -> None:
        """Gives `seq` the blocks that `num_new_tokens` more computed tokens need."""
        need = self.blocks_needed(seq, num_new_tokens)
        if need > len(self._free):
            raise RuntimeError(f"{seq} needs {need} blocks, {len(self._free)} free: call can_grow first")
        for _ in range(need):
            seq.block_table.append(self._free.popleft())

    def free(self, seq: Sequence) -> None:
        """Returns every block of `seq` at once (finish, abort, preemption)."""
        self._free.extend(seq.block_table)
        seq.block_table = []

    def slot(self, seq: Sequence, token_index: int) -> int:
        """Flat cache slot of the token at `token_index` of `seq`."""
        block = seq.block_table[token_index // self.block_size]
        return block * self.block_size + token_index % self.block_size
