"""The MoE block entry points (from x, or from router logits already computed): Triton on CUDA in bf16/fp16, the
exact PyTorch reference otherwise."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.kernels._backend import use_triton
from runtime.kernels.moe_config import MoeConfig
from runtime.kernels.moe_reference import SharedExpert, fused_moe_reference, routed_moe_reference

__all__ = ["SharedExpert", "fused_moe", "fused_moe_reference", "routed_moe", "routed_moe_reference"]


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
    return routed_moe(x, F.linear(x, router_w), w_gate_up, w_down, top_k, norm_topk_prob, shared, config)


def routed_moe(
    x: torch.Tensor,
    logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    norm_topk_prob: bool = True,
    shared: SharedExpert | None = None,
    config: MoeConfig | None = None,
) -> torch.Tensor:
    """`fused_moe` with the router logits [T, E] (= x @ router_w^T, in x's dtype) already computed, as the Thinker's
    fused norm + router kernel leaves them; x [T, H] -> [T, H]."""
    if x.shape[0] == 0:
        return torch.zeros_like(x)
    if not use_triton(x, logits, w_gate_up, w_down):
        return routed_moe_reference(x, logits, w_gate_up, w_down, top_k, norm_topk_prob, shared)
    from runtime.kernels.moe_triton import routed_moe_triton  # imports triton: only on the GPU path

    return routed_moe_triton(x, logits, w_gate_up, w_down, top_k, norm_topk_prob, shared, config)
