"""Optional FlashInfer backend for paged attention, used only where `import flashinfer` works (untested here)."""
from __future__ import annotations

import torch


class FlashInferPagedAttention:
    """Plan once per engine step from our block tables, then `run` for every layer.

    Our cache [2, num_blocks, block_size, Hkv, D] is FlashInfer's NHD layout as a (k, v) tuple; FlashInfer's
    causal mask aligns queries to the end of the KV, which is our kv_len - q_len + j rule.
    """

    def __init__(self, device: torch.device, workspace_bytes: int = 128 * 1024 * 1024) -> None:
        import flashinfer

        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
        self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")

    def plan(
        self, block_tables: torch.Tensor, kv_lens: torch.Tensor, cu_seqlens_q: torch.Tensor,
        num_q_heads: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype,
        scale: float | None = None,
    ) -> None:
        """Convert block tables to FlashInfer's page CSR (indptr, indices, last page length) and plan the step."""
        num_pages = (kv_lens + block_size - 1) // block_size  # [B]
        indptr = torch.zeros(kv_lens.numel() + 1, dtype=torch.int32, device=kv_lens.device)
        indptr[1:] = torch.cumsum(num_pages, 0)
        used = torch.arange(block_tables.shape[1], device=kv_lens.device)[None, :] < num_pages[:, None]
        indices = block_tables[used].to(torch.int32)  # row-major, so each sequence's pages stay in order
        last_page_len = (kv_lens - (num_pages - 1) * block_size).to(torch.int32)
        self.wrapper.plan(
            cu_seqlens_q.to(torch.int32), indptr, indices, last_page_len,
            num_q_heads, num_kv_heads, head_dim, block_size,
            causal=True, sm_scale=scale, q_data_type=dtype, kv_data_type=dtype,
        )

    def run(self, q: torch.Tensor, kv_cache: torch.Tensor) -> torch.Tensor:
        """q [Tq, Hq, D] over one layer's cache -> [Tq, Hq, D]."""
        return self.wrapper.run(q, (kv_cache[0], kv_cache[1]))
