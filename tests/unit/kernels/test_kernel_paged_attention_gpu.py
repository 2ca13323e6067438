"""GPU: the Triton paged attention (decode with and without KV splits, merged in the kernel or apart, varlen
prefill) against the reference, and in CUDA graphs."""
from __future__ import annotations

import pytest
import torch

from tests.unit.kernels.kernel_data import needs_cuda, paged_case, rel_err
from runtime.kernels.paged_attention import paged_attention, paged_decode_attention
from runtime.kernels.paged_attention_reference import paged_attention_reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]
BF16 = torch.bfloat16
TOL = 1e-2


def reference(case) -> torch.Tensor:  # noqa: ANN001
    return paged_attention_reference(case.q.float(), case.kv_cache.float(), case.block_tables, case.kv_lens,
                                     case.cu_seqlens_q)


@pytest.mark.parametrize(("q_heads", "kv_heads"), [(32, 4), (16, 2)])
@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("num_splits", [None, 1, 5])
@pytest.mark.parametrize("kv_lens", [[1], [3000], [1, 17, 256, 257, 999, 2048, 5, 64]])
def test_decode_matches_reference(
    q_heads: int, kv_heads: int, block_size: int, num_splits: int | None, kv_lens: list[int]
) -> None:
    pytest.importorskip("triton")
    from runtime.kernels.paged_attention_triton import paged_attention_triton

    case = paged_case([1] * len(kv_lens), kv_lens, q_heads, kv_heads, 128, block_size, BF16, "cuda", seed=len(kv_lens))
    out = paged_attention_triton(case.q, case.kv_cache, case.block_tables, case.kv_lens, case.cu_seqlens_q, 1,
                                 num_splits=num_splits)
    assert rel_err(out, reference(case)) < TOL


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize(("q_lens", "kv_lens"), [
    ([100], [100]),
    ([100, 1, 37, 1, 512], [100, 900, 60, 5, 1024]),  # whole prefill, decode rows, prefill chunks over a cache
    ([7, 300], [2000, 300]),
])
def test_varlen_prefill_matches_reference(block_size: int, q_lens: list[int], kv_lens: list[int]) -> None:
    pytest.importorskip("triton")
    case = paged_case(q_lens, kv_lens, 32, 4, 128, block_size, BF16, "cuda", seed=sum(q_lens))
    out = paged_attention(case.q, case.kv_cache, case.block_tables, case.kv_lens, case.cu_seqlens_q,
                          case.max_seqlen_q)
    assert rel_err(out, reference(case)) < TOL


def test_decode_has_no_host_sync_and_replays_in_a_cuda_graph() -> None:
    pytest.importorskip("triton")
    case = paged_case([1] * 4, [40, 700, 3, 129], 32, 4, 128, 16, BF16, "cuda", seed=5)
    args = (case.kv_cache, case.block_tables, case.kv_lens)
    static_q = case.q.clone()
    paged_decode_attention(static_q, *args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = paged_decode_attention(static_q, *args)
    fresh = torch.randn_like(static_q)
    static_q.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, paged_decode_attention(fresh, *args))


@pytest.mark.parametrize(("num_splits", "min_split_keys"), [(4, 64), (32, 64), (32, 256)])
@pytest.mark.parametrize("kv_lens", [[40], [300], [4096], [1, 17, 256, 999, 2048, 5000]])
def test_splits_match_the_reference_for_any_split_size(
    kv_lens: list[int], num_splits: int, min_split_keys: int
) -> None:
    """Short sequences fill fewer splits than launched (the empty ones must weigh nothing in the merge)."""
    pytest.importorskip("triton")
    from runtime.kernels.paged_attention_triton import paged_attention_triton

    case = paged_case([1] * len(kv_lens), kv_lens, 32, 4, 128, 16, BF16, "cuda", seed=sum(kv_lens))
    args = (case.q, case.kv_cache, case.block_tables, case.kv_lens, case.cu_seqlens_q, 1)
    out = paged_attention_triton(*args, num_splits=num_splits, min_split_keys=min_split_keys)
    assert rel_err(out, reference(case)) < TOL
    assert torch.equal(paged_attention_triton(*args, num_splits=num_splits, min_split_keys=min_split_keys), out)
