"""Plain-PyTorch MoE: router top-k and the routed/shared experts; the CPU path and the reference for the Triton MoE."""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class Routing(NamedTuple):
    """Which experts each token goes to and with what weight."""

    topk_ids: torch.Tensor  # int32 [T, k]
    topk_weights: torch.Tensor  # [T, k], in the router logits' dtype (as the model casts them)


class SharedExpert(NamedTuple):
    """An always-on SwiGLU expert scaled by sigmoid(x @ gate^T) (the talker has one; the thinker has none)."""

    gate_up_proj: torch.Tensor  # [2*Is, H], rows [gate; up]
    down_proj: torch.Tensor  # [H, Is]
    gate: torch.Tensor  # [1, H]


def topk_softmax_reference(logits: torch.Tensor, top_k: int, norm_topk_prob: bool = True) -> Routing:
    """Softmax over experts in fp32, top-k, optional renormalisation to sum 1, weights cast to the logits' dtype."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # [T, E]
    weights, ids = torch.topk(probs, top_k, dim=-1)  # [T, k]
    if norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return Routing(ids.to(torch.int32), weights.to(logits.dtype))


def route_reference(x: torch.Tensor, router_w: torch.Tensor, top_k: int, norm_topk_prob: bool = True) -> Routing:
    """Router logits x @ router_w^T (no bias) in the activations' dtype, then `topk_softmax_reference`."""
    return topk_softmax_reference(F.linear(x, router_w), top_k, norm_topk_prob)


def experts_reference(
    x: torch.Tensor, routing: Routing, w_gate_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    """Sum over each token's experts of weight * down(silu(gate(x)) * up(x)); x [T, H] -> [T, H].

    Pairs are grouped per expert with one sort, so each expert runs one GEMM; the one host sync (the
    per-expert counts) is free on CPU, which is where this path runs.
    """
    num_tokens, hidden = x.shape
    top_k = routing.topk_ids.shape[1]
    flat_ids = routing.topk_ids.reshape(-1).long()  # [T*k]
    flat_weights = routing.topk_weights.reshape(-1)  # [T*k]
    order = torch.argsort(flat_ids, stable=True)  # pair indices grouped by expert
    counts = torch.bincount(flat_ids, minlength=w_gate_up.shape[0]).tolist()
    out_pairs = x.new_zeros(num_tokens * top_k, hidden)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        pairs = order[start:start + count]
        gate, up = F.linear(x[pairs // top_k], w_gate_up[expert]).chunk(2, dim=-1)  # [c, I] each
        out = F.linear(F.silu(gate) * up, w_down[expert])  # [c, H]
        out_pairs[pairs] = out * flat_weights[pairs, None].to(out.dtype)
        start += count
    return out_pairs.view(num_tokens, top_k, hidden).sum(dim=1)


def shared_expert_forward(x: torch.Tensor, shared: SharedExpert) -> torch.Tensor:
    """sigmoid(x @ gate^T) * down(silu(gate(x)) * up(x)); x [T, H] -> [T, H]."""
    gate, up = F.linear(x, shared.gate_up_proj).chunk(2, dim=-1)  # [T, Is] each
    out = F.linear(F.silu(gate) * up, shared.down_proj)  # [T, H]
    return torch.sigmoid(F.linear(x, shared.gate)) * out


def fused_moe_reference(
    x: torch.Tensor,
    router_w: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    norm_topk_prob: bool = True,
    shared: SharedExpert | None = None,
) -> torch.Tensor:
    """The whole MoE block in plain PyTorch: route, run the routed experts, add the gated shared expert if any."""
    return routed_moe_reference(x, F.linear(x, router_w), w_gate_up, w_down, top_k, norm_topk_prob, shared)


def routed_moe_reference(
    x: torch.Tensor,
    logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    norm_topk_prob: bool = True,
    shared: SharedExpert | None = None,
) -> torch.Tensor:
    """`fused_moe_reference` from router logits [T, E] computed elsewhere."""
    out = experts_reference(x, topk_softmax_reference(logits, top_k, norm_topk_prob), w_gate_up, w_down)
    if shared is not None:
        out = out + shared_expert_forward(x, shared)
    return out
