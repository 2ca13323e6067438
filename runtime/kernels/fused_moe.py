"""The MoE block entry point: Triton on CUDA in bf16/fp16, the exact PyTorch reference otherwise."""
from __future__ import annotations

import torch

from runtime.kernels._backend import use_triton
from runtime.kernels.moe_config import MoeConfig
from runtime.kernels.moe_reference import SharedExpert, fused_moe_reference

__all__ = ["SharedExpert", "fused_moe", "fused_moe_reference"]


def fused_moe(
    x: torch.Tensor,
    router_w: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    norm_topk_prob: bool = True,
    shared: SharedExpert | None = None,
    config: MoeConfig | None = None,
) -> torch.Tensor:
    """MoE with softmax top-k routing and SwiGLU experts; x [T, H] -> [T, H].

    router_w [E, H]; w_gate_up [E, 2I, H] (rows [gate; up]); w_down [E, H, I]; `shared` adds the talker's
    sigmoid-gated shared expert. `config` overrides the tuned tiles (tuning and tests use it).
    """
    if x.shape[0] == 0:
        return torch.zeros_like(x)
    if not use_triton(x, router_w, w_gate_up, w_down):
        return fused_moe_reference(x, router_w, w_gate_up, w_down, top_k, norm_topk_prob, shared)
    from runtime.kernels.moe_triton import fused_moe_triton  # imports triton: only on the GPU path

    return fused_moe_triton(x, router_w, w_gate_up, w_down, top_k, norm_topk_prob, shared, config)
