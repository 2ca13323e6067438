"""GPU kernels for the decoders (fused MoE, paged attention, fused norms) in Triton, each beside its PyTorch reference.

Every entry point takes the Triton path for CUDA tensors in bf16/fp16 and the exact PyTorch reference otherwise,
so CPU callers and tests use the same functions. Importing this package never imports triton.
"""
from __future__ import annotations

from runtime.kernels.fused_moe import SharedExpert, fused_moe, fused_moe_reference
from runtime.kernels.moe_config import GemmConfig, MoeConfig
from runtime.kernels.paged_attention import attention_backend, paged_attention, paged_decode_attention
from runtime.kernels.paged_attention_reference import paged_attention_reference
from runtime.kernels.rmsnorm import QK, NormResult, fused_add_rmsnorm, qk_norm_rope
from runtime.kernels.rmsnorm_reference import add_rmsnorm_reference, qk_norm_rope_reference

__all__ = [
    "QK", "GemmConfig", "MoeConfig", "NormResult", "SharedExpert",
    "add_rmsnorm_reference", "attention_backend", "fused_add_rmsnorm", "fused_moe", "fused_moe_reference",
    "paged_attention", "paged_attention_reference", "paged_decode_attention", "qk_norm_rope", "qk_norm_rope_reference",
]
