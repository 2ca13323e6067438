"""Attention over a paged KV cache: per-step context, cache storage, and the exact PyTorch reference path."""
from __future__ import annotations

from runtime.attention.context import AttentionContext, build_attention_context
from runtime.attention.kv_cache import allocate_kv_cache, write_kv
from runtime.attention.paged_torch import paged_attention

__all__ = ["AttentionContext", "allocate_kv_cache", "build_attention_context", "paged_attention", "write_kv"]
