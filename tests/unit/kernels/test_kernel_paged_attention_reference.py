"""CPU tests of the paged-attention reference against plain attention math, and of the CPU dispatch."""
from __future__ import annotations

import math

import pytest
import torch

from tests.unit.kernels.kernel_data import paged_case, rel_err
from runtime.kernels.paged_attention import attention_backend, paged_attention, paged_decode_attention
from runtime.kernels.paged_attention_reference import (
    gathered_sdpa_decode, paged_attention_reference, paged_decode_attention_reference,
)


def naive_attention(case, num_kv_heads: int) -> torch.Tensor:
    """Softmax attention written out per sequence, reading the cache position by position."""
    q, kv, tables = case.q.double(), case.kv_cache.double(), case.block_tables
    block_size = kv.shape[2]
    out = torch.empty_like(q)
    cu = case.cu_seqlens_q.tolist()
    for b, kv_len in enumerate(case.kv_lens.tolist()):
        k = torch.stack([kv[0, tables[b, p // block_size], p % block_size] for p in range(kv_len)])  # [L, Hkv, D]
        v = torch.stack([kv[1, tables[b, p // block_size], p % block_size] for p in range(kv_len)])
        group = q.shape[1] // num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # [L, Hq, D]
        q_b = q[cu[b]:cu[b + 1]]  # [q_len, Hq, D]
        scores = torch.einsum("thd,lhd->htl", q_b, k) / math.sqrt(q.shape[2])
        q_pos = torch.arange(kv_len - q_b.shape[0], kv_len)
        scores = scores.masked_fill(torch.arange(kv_len)[None, None, :] > q_pos[None, :, None], float("-inf"))
        out[cu[b]:cu[b + 1]] = torch.einsum("htl,lhd->thd", scores.softmax(-1), v)
    return out


@pytest.mark.parametrize("block_size", [4, 16])
def test_reference_matches_naive_attention_on_mixed_batches(block_size: int) -> None:
    # a whole prefill, a prefill chunk over cached tokens, and two decode rows
    case = paged_case([6, 3, 1, 1], [6, 21, 1, 37], 8, 2, 16, block_size, torch.float32, "cpu", seed=1)
    out = paged_attention_reference(case.q, case.kv_cache, case.block_tables, case.kv_lens, case.cu_seqlens_q)
    assert rel_err(out, naive_attention(case, 2)) < 1e-6


def test_decode_reference_equals_gathered_sdpa_and_the_varlen_path() -> None:
    case = paged_case([1, 1, 1], [5, 40, 17], 4, 1, 8, 8, torch.float32, "cpu", seed=2)
    ref = paged_decode_attention_reference(case.q, case.kv_cache, case.block_tables, case.kv_lens)
    assert rel_err(gathered_sdpa_decode(case.q, case.kv_cache, case.block_tables, case.kv_lens), ref) < 1e-6
    assert rel_err(ref, naive_attention(case, 1)) < 1e-6


def test_cpu_dispatch_uses_the_reference() -> None:
    case = paged_case([2, 1], [9, 4], 4, 2, 8, 4, torch.float32, "cpu", seed=3)
    args = (case.kv_cache, case.block_tables, case.kv_lens)
    expected = paged_attention_reference(case.q, *args, case.cu_seqlens_q, 0.3)
    assert torch.equal(paged_attention(case.q, *args, case.cu_seqlens_q, case.max_seqlen_q, 0.3), expected)
    q1 = case.q[:2]
    assert torch.equal(paged_decode_attention(q1, *args), paged_decode_attention_reference(q1, *args))
    assert attention_backend("cpu") == "torch"


def test_multi_token_tiles_take_power_of_two_splits_and_one_token_tiles_the_exact_count() -> None:
    pytest.importorskip("triton")
    from runtime.kernels.paged_attention_triton import PREFILL_SPLITS, choose_splits, split_count

    seen = set()
    for programs in (1, 3, 4, 7, 12, 20, 40, 132, 500):
        for max_kv in (64, 300, 1500, 4096, 32768):
            exact = choose_splits(programs, max_kv, 132)
            assert split_count(1, programs, max_kv, 132) == exact
            tiled = split_count(32, programs, max_kv, 132)
            assert tiled in PREFILL_SPLITS and tiled <= exact < 2 * tiled
            seen.add(tiled)
    assert seen == set(PREFILL_SPLITS)  # every count compile_prefill_variants compiles is met, and no other
