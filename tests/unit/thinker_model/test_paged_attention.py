"""paged_attention against plain causal SDPA on random shapes: prefill, chunked prefill, decode, mixed batches."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from runtime.attention import AttentionContext, allocate_kv_cache, build_attention_context, paged_attention

HQ, HKV, D = 4, 2, 8


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Whole-sequence causal GQA attention, queries being the last q.shape[0] of k's positions."""
    q_len, kv_len = q.shape[0], k.shape[0]
    group = HQ // HKV
    k_rep = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, L, D]
    v_rep = v.repeat_interleave(group, dim=1).transpose(0, 1)
    mask = torch.ones(kv_len, kv_len, dtype=torch.bool).tril()[kv_len - q_len:]
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k_rep, v_rep, attn_mask=mask, scale=scale)
    return out.transpose(0, 1)


class PagedSequences:
    """Random sequences whose KV lives in shuffled, non-contiguous blocks, fed to paged_attention step by step."""

    def __init__(self, lengths: list[int], block_size: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.q = [torch.randn(n, HQ, D, generator=gen) for n in lengths]
        self.k = [torch.randn(n, HKV, D, generator=gen) for n in lengths]
        self.v = [torch.randn(n, HKV, D, generator=gen) for n in lengths]
        self.block_size = block_size
        num_blocks = sum(-(-n // block_size) for n in lengths) + 3
        free = list(range(num_blocks))
        random.Random(seed).shuffle(free)
        self.tables = [[free.pop() for _ in range(-(-n // block_size))] for n in lengths]
        self.cache = allocate_kv_cache(1, num_blocks, block_size, HKV, D, torch.float32, "cpu")[0]
        self.done = [0] * len(lengths)

    def step(self, q_lens: dict[int, int]) -> dict[int, torch.Tensor]:
        """Feed q_lens[seq] new tokens of each listed sequence in one packed call; outputs per sequence."""
        seqs = list(q_lens)
        parts = [(s, self.done[s], self.done[s] + q_lens[s]) for s in seqs]
        ctx = build_attention_context(
            [q_lens[s] for s in seqs], [end for _, _, end in parts], [self.tables[s] for s in seqs], self.block_size
        )
        q = torch.cat([self.q[s][a:b] for s, a, b in parts])
        k = torch.cat([self.k[s][a:b] for s, a, b in parts])
        v = torch.cat([self.v[s][a:b] for s, a, b in parts])
        out = paged_attention(q, k, v, self.cache, ctx, scale=D ** -0.5)
        results, row = {}, 0
        for s, a, b in parts:
            results[s] = out[row:row + b - a]
            row += b - a
            self.done[s] = b
        return results

    def expected(self, seq: int, start: int, end: int) -> torch.Tensor:
        return reference(self.q[seq][start:end], self.k[seq][:end], self.v[seq][:end], D ** -0.5)[: end - start]


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_packed_prefill_matches_sdpa(block_size: int) -> None:
    seqs = PagedSequences([5, 1, 13, 7], block_size, seed=block_size)
    out = seqs.step({0: 5, 1: 1, 2: 13, 3: 7})
    for s, n in enumerate([5, 1, 13, 7]):
        torch.testing.assert_close(out[s], seqs.expected(s, 0, n), rtol=1e-5, atol=1e-6)


def test_chunked_prefill_then_decode_matches_sdpa() -> None:
    seqs = PagedSequences([11], block_size=4, seed=1)
    for start, end in [(0, 4), (4, 9), (9, 10), (10, 11)]:
        out = seqs.step({0: end - start})
        torch.testing.assert_close(out[0], seqs.expected(0, start, end), rtol=1e-5, atol=1e-6)


def test_mixed_prefill_chunks_and_decode_rows_in_one_call() -> None:
    seqs = PagedSequences([9, 6, 12], block_size=4, seed=2)
    seqs.step({0: 8, 1: 5})  # two earlier prefills
    out = seqs.step({0: 1, 2: 7, 1: 1})  # decode, first prefill chunk, decode
    torch.testing.assert_close(out[0], seqs.expected(0, 8, 9), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[2], seqs.expected(2, 0, 7), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[1], seqs.expected(1, 5, 6), rtol=1e-5, atol=1e-6)
    out = seqs.step({2: 5})  # the rest of the chunked prefill
    torch.testing.assert_close(out[2], seqs.expected(2, 7, 12), rtol=1e-5, atol=1e-6)


def test_writes_land_at_their_slots_and_nowhere_else() -> None:
    seqs = PagedSequences([6], block_size=4, seed=3)
    seqs.step({0: 6})
    flat = seqs.cache.view(2, -1, HKV, D)
    slots = [seqs.tables[0][p // 4] * 4 + p % 4 for p in range(6)]
    torch.testing.assert_close(flat[0, slots], seqs.k[0])
    torch.testing.assert_close(flat[1, slots], seqs.v[0])
    others = [i for i in range(flat.shape[1]) if i not in slots]
    assert not flat[:, others].any()


def test_context_fields() -> None:
    ctx = build_attention_context([3, 1], [3, 6], [[7], [2, 5]], block_size=4)
    assert isinstance(ctx, AttentionContext)
    assert ctx.cu_seqlens_q.tolist() == [0, 3, 4] and ctx.cu_seqlens_q.dtype == torch.int32
    assert ctx.kv_lens.tolist() == [3, 6] and ctx.kv_lens.dtype == torch.int32
    assert ctx.slot_mapping.tolist() == [28, 29, 30, 21] and ctx.slot_mapping.dtype == torch.int64
    assert ctx.block_tables.tolist() == [[7, 0], [2, 5]] and ctx.block_tables.dtype == torch.int32
    assert (ctx.num_seqs, ctx.num_tokens) == (2, 4)


@pytest.mark.parametrize(
    ("q_lens", "kv_lens", "tables", "match"),
    [
        ([1, 2], [3], [[0]], "one entry per sequence"),
        ([4], [3], [[0]], "q_len"),
        ([0], [3], [[0]], "q_len"),
        ([1], [9], [[0, 1]], "block table"),
    ],
)
def test_context_rejects_bad_layouts(
    q_lens: list[int], kv_lens: list[int], tables: list[list[int]], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        build_attention_context(q_lens, kv_lens, tables, block_size=4)


def test_allocate_kv_cache_shapes_and_errors() -> None:
    caches = allocate_kv_cache(3, 5, 4, 2, 8, torch.float32, "cpu")
    assert len(caches) == 3 and all(c.shape == (2, 5, 4, 2, 8) for c in caches)
    assert caches[0].data_ptr() != caches[1].data_ptr()
    with pytest.raises(ValueError, match="num_blocks"):
        allocate_kv_cache(3, 0, 4, 2, 8, torch.float32, "cpu")
