"""Plain-PyTorch attention over a paged KV cache (packed queries, causal with offset): the reference for the kernels."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def gather_sequence_kv(
    kv_cache: torch.Tensor, block_table: torch.Tensor, kv_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first kv_len keys and values of one sequence, each [kv_len, Hkv, D]; kv_cache [2, NB, BS, Hkv, D]."""
    block_size = kv_cache.shape[2]
    pos = torch.arange(kv_len, device=kv_cache.device)
    blocks = block_table[pos // block_size].long()
    return kv_cache[0, blocks, pos % block_size], kv_cache[1, blocks, pos % block_size]


def paged_attention_reference(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    kv_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal GQA attention of packed queries q [Tq, Hq, D] over each sequence's cached KV -> [Tq, Hq, D].

    Sequence b owns query rows cu_seqlens_q[b]:cu_seqlens_q[b+1] and kv_lens[b] cached tokens (this step's
    included); its query row j sits at KV position kv_lens[b] - q_len + j and sees keys up to there.
    """
    out = torch.empty_like(q)
    cu = cu_seqlens_q.tolist()
    for b, kv_len in enumerate(kv_lens.tolist()):
        start, end = cu[b], cu[b + 1]
        if end == start:
            continue
        k, v = gather_sequence_kv(kv_cache, block_tables[b], kv_len)  # [L, Hkv, D] each
        q_pos = torch.arange(kv_len - (end - start), kv_len, device=q.device)
        allowed = torch.arange(kv_len, device=q.device)[None, :] <= q_pos[:, None]  # [q_len, L]
        o = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1), k.transpose(0, 1).to(q.dtype), v.transpose(0, 1).to(q.dtype),
            attn_mask=allowed, scale=scale, enable_gqa=True,
        )  # [Hq, q_len, D]
        out[start:end] = o.transpose(0, 1)
    return out


def paged_decode_attention_reference(
    q: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor, kv_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """One query per sequence, q [B, Hq, D], attending to all kv_lens[b] cached tokens -> [B, Hq, D]."""
    cu = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    return paged_attention_reference(q, kv_cache, block_tables, kv_lens, cu, scale)


def gathered_sdpa_decode(
    q: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor, kv_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Decode as a batched torch program (no host sync): gather every table's pages densely, mask by kv_lens, SDPA.

    The baseline a plain-PyTorch engine would run on the GPU; q [B, Hq, D] -> [B, Hq, D].
    """
    batch, max_blocks = block_tables.shape
    _, _, block_size, num_kv_heads, head_dim = kv_cache.shape
    kv = kv_cache[:, block_tables.long()]  # [2, B, max_blocks, BS, Hkv, D]
    kv = kv.reshape(2, batch, max_blocks * block_size, num_kv_heads, head_dim).transpose(2, 3)  # [2, B, Hkv, L, D]
    valid = torch.arange(max_blocks * block_size, device=q.device)[None, :] < kv_lens[:, None]  # [B, L]
    o = F.scaled_dot_product_attention(
        q[:, :, None, :], kv[0], kv[1], attn_mask=valid[:, None, None, :], scale=scale, enable_gqa=True
    )  # [B, Hq, 1, D]
    return o[:, :, 0]
