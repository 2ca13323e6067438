"""Sparse MoE block: softmax router, top-k with renormalisation, SwiGLU experts stored fused."""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from runtime.kernels.fused_moe import fused_moe, routed_moe
from services.thinker.model.config import ThinkerConfig


class Routing(NamedTuple):
    weights: torch.Tensor  # [T, k] in the activation dtype
    experts: torch.Tensor  # [T, k] int64 expert ids


class SparseMoE(nn.Module):
    """Experts live fused: gate_up_proj [E, 2I, H] (rows: gate then up) and down_proj [E, H, I]."""

    def __init__(self, cfg: ThinkerConfig) -> None:
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.num_experts = cfg.num_experts
        self.norm_topk_prob = cfg.norm_topk_prob
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)  # the router
        self.gate_up_proj = nn.Parameter(torch.empty(cfg.num_experts, 2 * cfg.moe_intermediate_size, cfg.hidden_size))
        self.down_proj = nn.Parameter(torch.empty(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size))

    def route(self, x: torch.Tensor) -> Routing:
        """x: [T, H]. Softmax in fp32 so routing is stable in bf16; weights go back to the activation dtype."""
        probs = torch.softmax(self.gate(x), dim=-1, dtype=torch.float32)  # [T, E]
        weights, experts = torch.topk(probs, self.top_k, dim=-1)  # [T, k]
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return Routing(weights.to(x.dtype), experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        return self.run_experts(x, self.route(x))

    def forward_fused(self, x: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        """The GPU path without a host sync: routing and the expert GEMMs in runtime.kernels; x: [T, H] -> [T, H].

        logits: the router logits [T, E] of x when already computed (the fused norm + router kernel)."""
        if logits is None:
            return fused_moe(x, self.gate.weight, self.gate_up_proj, self.down_proj, self.top_k, self.norm_topk_prob)
        return routed_moe(x, logits, self.gate_up_proj, self.down_proj, self.top_k, self.norm_topk_prob)

    def run_experts(self, x: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Exact grouped loop: (token, expert) pairs sorted by expert, one matmul pair per expert that has tokens."""
        flat_experts = routing.experts.reshape(-1)  # [T * k]
        flat_weights = routing.weights.reshape(-1)  # [T * k]
        order = torch.argsort(flat_experts, stable=True)  # [T * k], pairs grouped by expert
        counts = torch.bincount(flat_experts, minlength=self.num_experts).tolist()  # one host sync per layer
        out = torch.zeros_like(x)
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            pairs = order[start:start + count]
            start += count
            tokens = pairs // self.top_k
            gate, up = F.linear(x[tokens], self.gate_up_proj[expert]).chunk(2, dim=-1)  # [n, I] each
            y = F.linear(F.silu(gate) * up, self.down_proj[expert])  # [n, H]
            out.index_add_(0, tokens, y * flat_weights[pairs, None])
        return out
