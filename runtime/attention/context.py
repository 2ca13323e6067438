"""Per-step attention metadata for a packed batch over a paged KV cache, built once per step for all layers."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.transfer import to_device


@dataclass
class AttentionContext:
    """Where each sequence's queries sit in the packed batch and where its KV lives in the paged cache.

    Sequence `i` owns query rows `cu_seqlens_q[i]:cu_seqlens_q[i+1]`; after this step's tokens are written its KV
    holds `kv_lens[i]` tokens, so its query row `j` sits at KV position `kv_lens[i] - q_len_i + j`. That one rule
    covers whole prefills, prefill chunks and decode rows (q_len 1) in the same batch.
    """

    cu_seqlens_q: torch.Tensor  # int32 [B+1]
    kv_lens: torch.Tensor  # int32 [B]
    slot_mapping: torch.Tensor  # int64 [T], block_id * block_size + offset of each new token
    block_tables: torch.Tensor  # int32 [B, max_blocks_per_seq], padded with 0
    block_size: int
    q_lens_host: list[int]  # host copies for the CPU reference path; a GPU kernel must not need them
    kv_lens_host: list[int]

    @property
    def num_seqs(self) -> int:
        return len(self.q_lens_host)

    @property
    def num_tokens(self) -> int:
        return sum(self.q_lens_host)


def build_attention_context(
    q_lens: list[int],
    kv_lens: list[int],
    block_tables: list[list[int]],
    block_size: int,
    device: torch.device | str = "cpu",
) -> AttentionContext:
    """An AttentionContext from host lists: the slots of each sequence's new tokens follow from its block table.

    The engine may build its own tensors directly; this is the plain reference used by tests and the CPU path.
    """
    if not (len(q_lens) == len(kv_lens) == len(block_tables)):
        raise ValueError(
            f"q_lens ({len(q_lens)}), kv_lens ({len(kv_lens)}) and block_tables ({len(block_tables)}) "
            "must have one entry per sequence"
        )
    slots: list[int] = []
    for i, (q_len, kv_len, table) in enumerate(zip(q_lens, kv_lens, block_tables)):
        if not 0 < q_len <= kv_len:
            raise ValueError(f"sequence {i}: need 0 < q_len ({q_len}) <= kv_len ({kv_len})")
        if len(table) * block_size < kv_len:
            raise ValueError(
                f"sequence {i}: block table of {len(table)} blocks x {block_size} "
                f"holds fewer than kv_len {kv_len} tokens"
            )
        for pos in range(kv_len - q_len, kv_len):
            slots.append(table[pos // block_size] * block_size + pos % block_size)
    max_blocks = max((len(t) for t in block_tables), default=0)
    padded = [t + [0] * (max_blocks - len(t)) for t in block_tables]
    cu = [0]
    for q_len in q_lens:
        cu.append(cu[-1] + q_len)
    device = torch.device(device)
    # through pinned memory: a pageable upload would wait for the step an engine running ahead has in flight
    return AttentionContext(
        cu_seqlens_q=to_device(torch.tensor(cu, dtype=torch.int32), device),
        kv_lens=to_device(torch.tensor(kv_lens, dtype=torch.int32), device),
        slot_mapping=to_device(torch.tensor(slots, dtype=torch.int64), device),
        block_tables=to_device(torch.tensor(padded, dtype=torch.int32), device).reshape(len(q_lens), max_blocks),
        block_size=block_size,
        q_lens_host=list(q_lens),
        kv_lens_host=list(kv_lens),
    )
