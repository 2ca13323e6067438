"""Exact plain-PyTorch paged attention: the CPU path and the reference every GPU attention kernel is tested against."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.attention.context import AttentionContext
from runtime.attention.kv_cache import K, V, flat_slots, write_kv


def gather_kv(kv_cache: torch.Tensor, block_table: torch.Tensor, kv_len: int, block_size: int) -> torch.Tensor:
    """The first `kv_len` cached tokens of one sequence, in order: [2, kv_len, Hkv, D]."""
    positions = torch.arange(kv_len, device=kv_cache.device)
    slots = block_table[positions // block_size].long() * block_size + positions % block_size
    return flat_slots(kv_cache)[:, slots]


def causal_mask(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    """[q_len, kv_len] bool, True where attention is allowed: query j sits at KV position kv_len - q_len + j."""
    q_pos = torch.arange(kv_len - q_len, kv_len, device=device)
    k_pos = torch.arange(kv_len, device=device)
    return k_pos[None, :] <= q_pos[:, None]


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    ctx: AttentionContext,
    scale: float,
) -> torch.Tensor:
    """Write this step's k/v ([T, Hkv, D]) into the cache, then causal GQA attention of q ([T, Hq, D]) per sequence.

    Returns [T, Hq, D]. Sequences may mix whole prefills, prefill chunks and decode rows in one batch.
    """
    write_kv(kv_cache, k, v, ctx.slot_mapping)
    out = torch.empty_like(q)
    start = 0
    for i, (q_len, kv_len) in enumerate(zip(ctx.q_lens_host, ctx.kv_lens_host)):
        kv = gather_kv(kv_cache, ctx.block_tables[i], kv_len, ctx.block_size)  # [2, L, Hkv, D]
        q_i = q[start:start + q_len].transpose(0, 1)  # [Hq, q_len, D]
        k_i = kv[K].transpose(0, 1).to(q.dtype)  # [Hkv, L, D]
        v_i = kv[V].transpose(0, 1).to(q.dtype)  # [Hkv, L, D]
        o_i = F.scaled_dot_product_attention(
            q_i, k_i, v_i, attn_mask=causal_mask(q_len, kv_len, q.device), scale=scale, enable_gqa=True
        )  # [Hq, q_len, D]
        out[start:start + q_len] = o_i.transpose(0, 1)
        start += q_len
    return out
