"""What the kernel tests share: skewed MoE routings, paged KV caches, error measures, and the entry point of the
test files that check their kernel by running themselves."""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from runtime.kernels.moe_reference import Routing


def self_check_main(mode: str, interpreted: Callable[[torch.dtype], None], compiled: Callable[[], None],
                    label: str, dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16),
                    ) -> None:  # fmt: skip
    """The script side of a test file that checks its kernel by running itself (`python file.py interpret|compile`,
    see tests/triton_scripts.py): the interpreter check in each of `dtypes`, or the sm_90 compile check."""
    torch.set_num_threads(1)
    if mode == "interpret":
        from tests.unit.kernels.interpreter_check import patch_numpy_scalars

        patch_numpy_scalars()
        for dtype in dtypes:
            interpreted(dtype)
    else:
        compiled()
    print(f"{label}: {mode} checks passed")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64; NaN anywhere fails every comparison against it."""
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm())


def skewed_routing(
    num_tokens: int, num_experts: int, top_k: int, hot: int, dtype: torch.dtype, device: str, seed: int = 0
) -> Routing:
    """Every token routes to expert `hot` plus k-1 others drawn from the lowest few experts: one expert with most
    pairs, a few busy ones, and most experts empty (when E is large against T*k)."""
    gen = torch.Generator().manual_seed(seed)
    pool = [e for e in range(min(num_experts, top_k + 3)) if e != hot]
    rows = []
    for _ in range(num_tokens):
        others = torch.randperm(len(pool), generator=gen)[: top_k - 1].tolist()
        rows.append([hot] + [pool[i] for i in others])
    ids = torch.tensor(rows, dtype=torch.int32)
    weights = torch.softmax(torch.randn(num_tokens, top_k, generator=gen), dim=-1)
    return Routing(ids.to(device), weights.to(dtype).to(device))


def skewed_logits(
    num_tokens: int, num_experts: int, top_k: int, hot: int, dtype: torch.dtype, device: str, seed: int = 0
) -> torch.Tensor:
    """Router logits [T, E] whose top-k is `skewed_routing`'s kind of load: every token ranks `hot` first and k-1
    experts of a small pool next (distinct, well-separated values), the rest far below; for kernels that route."""
    routing = skewed_routing(num_tokens, num_experts, top_k, hot, torch.float32, "cpu", seed)
    gen = torch.Generator().manual_seed(seed + 1)
    logits = torch.randn(num_tokens, num_experts, generator=gen) * 0.1
    ranks = torch.arange(top_k, 0, -1, dtype=torch.float32) * 0.5 + 2.0  # 0.5 apart: no ties in half precision
    logits.scatter_(1, routing.topk_ids.long(), ranks.expand(num_tokens, top_k).contiguous())
    return logits.to(dtype).to(device)


def tie_free_rows(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Rows whose k-th and (k+1)-th largest logits differ: only there is the top-k set unambiguous."""
    top = torch.topk(logits.float(), top_k + 1, dim=-1).values
    return top[:, top_k - 1] != top[:, top_k]


class PagedCase(NamedTuple):
    q: torch.Tensor  # [Tq, Hq, D]
    kv_cache: torch.Tensor  # [2, num_blocks, block_size, Hkv, D]
    block_tables: torch.Tensor  # int32 [B, max_blocks]
    kv_lens: torch.Tensor  # int32 [B]
    cu_seqlens_q: torch.Tensor  # int32 [B+1]
    max_seqlen_q: int


def paged_case(
    q_lens: list[int], kv_lens: list[int], num_q_heads: int, num_kv_heads: int, head_dim: int, block_size: int,
    dtype: torch.dtype, device: str, seed: int = 0, spare_blocks: int = 3,
) -> PagedCase:
    """Random q and cache; each sequence gets randomly placed blocks (tables padded with 0), plus unused blocks."""
    gen = torch.Generator().manual_seed(seed)
    need = [-(-n // block_size) for n in kv_lens]
    max_blocks = max(need)
    num_blocks = sum(need) + spare_blocks
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, used = [], 0
    for n in need:
        tables.append(perm[used:used + n] + [0] * (max_blocks - n))
        used += n
    kv = torch.randn(2, num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    q = torch.randn(sum(q_lens), num_q_heads, head_dim, generator=gen)
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    return PagedCase(
        q.to(dtype).to(device), kv.to(dtype).to(device),
        torch.tensor(tables, dtype=torch.int32, device=device),
        torch.tensor(kv_lens, dtype=torch.int32, device=device), cu.to(device), max(q_lens),
    )


def needs_cuda() -> bool:
    return torch.cuda.is_available()


def check_alignment(sorted_ids: torch.Tensor, expert_ids: torch.Tensor, num_padded: int, topk_ids: torch.Tensor,
                    num_experts: int, block_m: int, ordered: bool = True) -> None:
    """Assert the grouping invariants: every pair once, each block one expert's pairs (in pair order when
    `ordered`; the Triton grouping places chunks in atomic order), padding only at the end of an expert."""
    flat = topk_ids.reshape(-1).long().cpu()
    num_pairs = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    assert num_padded == int(((counts + block_m - 1) // block_m * block_m).sum())
    rows = sorted_ids[:num_padded].long().cpu()
    real = rows[rows < num_pairs]
    assert torch.equal(torch.sort(real).values, torch.arange(num_pairs)), "each pair exactly once"
    assert bool((rows[rows >= num_pairs] == num_pairs).all()), "padding holds the sentinel"
    blocks = expert_ids.long().cpu()
    num_blocks = num_padded // block_m
    assert bool((blocks[num_blocks:] == -1).all()), "blocks past the end are marked -1"
    for b in range(num_blocks):
        block = rows[b * block_m:(b + 1) * block_m]
        pairs = block[block < num_pairs]
        assert bool((flat[pairs] == blocks[b]).all()), f"block {b} mixes experts"
        assert torch.equal(block[: pairs.numel()], pairs), f"block {b}: padding only after its pairs"
        if pairs.numel() < block_m and b + 1 < num_blocks:
            assert blocks[b + 1] != blocks[b], f"block {b}: padding before the expert's last block"
        if ordered:
            assert bool((pairs[1:] > pairs[:-1]).all()), f"block {b}: pairs in pair order"
