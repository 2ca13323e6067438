"""Paged attention entry points: Triton on CUDA in bf16/fp16, the exact PyTorch reference otherwise."""
from __future__ import annotations

import importlib.util

import torch

from runtime.kernels._backend import use_triton
from runtime.kernels.paged_attention_reference import paged_attention_reference

__all__ = ["attention_backend", "paged_attention", "paged_decode_attention"]


def attention_backend(device: torch.device | str) -> str:
    """'flashinfer' on CUDA when it is importable, 'triton' on CUDA otherwise, 'torch' on CPU.

    FlashInfer needs per-step planning, so it is used through `FlashInferPagedAttention`
    (paged_attention_flashinfer.py); the functions below are the Triton/torch paths.
    """
    if torch.device(device).type != "cuda":
        return "torch"
    return "flashinfer" if importlib.util.find_spec("flashinfer") is not None else "triton"


def paged_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    kv_lens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    max_seqlen_q: int,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal GQA attention of packed queries over a paged KV cache (this step's KV already written) -> [Tq, Hq, D].

    q [Tq, Hq, D]; kv_cache [2, num_blocks, block_size, Hkv, D]; block_tables int32 [B, max_blocks];
    kv_lens int32 [B]; cu_seqlens_q int32 [B+1]; max_seqlen_q a host int >= every q_len (1 for pure decode).
    Query row j of sequence b sits at KV position kv_lens[b] - q_len_b + j and sees keys up to there.
    """
    if use_triton(q, kv_cache):
        from runtime.kernels.paged_attention_triton import paged_attention_triton  # imports triton

        return paged_attention_triton(q, kv_cache, block_tables, kv_lens, cu_seqlens_q, max_seqlen_q, scale)
    return paged_attention_reference(q, kv_cache, block_tables, kv_lens, cu_seqlens_q, scale)


def paged_decode_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    kv_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """One query per sequence: q [B, Hq, D] over each sequence's kv_lens[b] cached tokens -> [B, Hq, D]."""
    cu_seqlens_q = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    return paged_attention(q, kv_cache, block_tables, kv_lens, cu_seqlens_q, 1, scale)
