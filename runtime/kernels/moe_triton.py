"""The Triton MoE forward without a host sync: router GEMM, then for decode-size batches the two-launch small path
(moe_small_triton), else fused top-k, expert grouping, two grouped GEMMs and the top-k sum."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from runtime.kernels.moe_align_triton import align_triton
from runtime.kernels.moe_config import MoeConfig, moe_config
from runtime.kernels.moe_gemm_triton import down_weighted, gate_up_silu
from runtime.kernels.moe_reference import Routing, SharedExpert, shared_expert_forward
from runtime.kernels.moe_route_triton import topk_softmax_triton
from runtime.kernels.moe_small_triton import experts_small_triton


@functools.cache
def device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def config_for(x: torch.Tensor, w_gate_up: torch.Tensor, top_k: int) -> MoeConfig:
    num_experts, two_inter, hidden = w_gate_up.shape
    return moe_config(num_experts, hidden, two_inter // 2, top_k, x.shape[0], device_name(x.device.index or 0))


def experts_triton(
    x: torch.Tensor, routing: Routing, w_gate_up: torch.Tensor, w_down: torch.Tensor, cfg: MoeConfig
) -> torch.Tensor:
    """Routed experts only: x [T, H] -> [T, H]."""
    num_tokens, hidden = x.shape
    top_k = routing.topk_ids.shape[1]
    grouping = align_triton(routing.topk_ids, w_gate_up.shape[0], cfg.block_m)
    act = gate_up_silu(x, w_gate_up, grouping, top_k, cfg.gate_up)  # [max_padded, I]
    out_pairs = down_weighted(act, w_down, routing.topk_weights.contiguous(), grouping, cfg.down)  # [T*k, H]
    return out_pairs.view(num_tokens, top_k, hidden).sum(dim=1)


def fused_moe_triton(
    x: torch.Tensor,
    router_w: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    norm_topk_prob: bool = True,
    shared: SharedExpert | None = None,
    config: MoeConfig | None = None,
) -> torch.Tensor:
    """The MoE block on the GPU; same contract as `fused_moe_reference`."""
    x = x.contiguous()
    return routed_moe_triton(x, F.linear(x, router_w), w_gate_up, w_down, top_k, norm_topk_prob, shared, config)


def routed_moe_triton(
    x: torch.Tensor,
    logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    norm_topk_prob: bool = True,
    shared: SharedExpert | None = None,
    config: MoeConfig | None = None,
) -> torch.Tensor:
    """The MoE block from router logits [T, E] computed elsewhere (e.g. inside the norm before it); x [T, H]."""
    x = x.contiguous()
    cfg = config or config_for(x, w_gate_up, top_k)
    if x.shape[0] <= cfg.small_max_tokens:
        out = experts_small_triton(x, logits.contiguous(), w_gate_up, w_down, top_k, norm_topk_prob,
                                   cfg.small_gate_up, cfg.small_down)
    else:
        out = experts_triton(x, topk_softmax_triton(logits, top_k, norm_topk_prob), w_gate_up, w_down, cfg)
    if shared is not None:
        out = out + shared_expert_forward(x, shared)
    return out
