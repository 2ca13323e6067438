"""The Talker's MoE feed-forward: softmax top-k routed SwiGLU experts plus a sigmoid-gated shared SwiGLU expert."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.layers import SwiGLU


class Router(nn.Module):
    """Linear scores, softmax in fp32, top-k, optional renormalisation over the chosen k."""

    def __init__(self, dim: int, num_experts: int, top_k: int, norm_topk_prob: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_experts, dim))
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x `(N, dim)` -> (weights `(N, k)` in x's dtype, expert ids `(N, k)`)."""
        probs = F.linear(x, self.weight).softmax(dim=-1, dtype=torch.float32)
        weights, ids = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), ids


class RoutedExperts(nn.Module):
    """E SwiGLU experts stored fused: `gate_up_proj` `(E, 2I, dim)` (rows = [gate; up]), `down_proj` `(E, dim, I)`."""

    def __init__(self, dim: int, num_experts: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate, dim))
        self.down_proj = nn.Parameter(torch.empty(num_experts, dim, intermediate))
        # grouped_mm is the GPU path; the per-expert loop is the exact CPU reference it is tested against.
        self.use_grouped_mm = False

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if self.use_grouped_mm:
            return self._grouped(x, weights, ids)
        return self._loop(x, weights, ids)

    def _loop(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for expert in ids.unique().tolist():
            token, slot = torch.where(ids == expert)
            gate, up = F.linear(x[token], self.gate_up_proj[expert]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[expert]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out

    def _grouped(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Sort the N*k (token, expert) pairs by expert and run two grouped GEMMs; no host sync."""
        top_k = ids.shape[1]
        flat = ids.flatten()  # (N*k,)
        order = flat.argsort(stable=True)
        token = order // top_k
        # scatter_add, not bincount: bincount reads the largest id back to the host (a sync; no graph capture)
        counts = flat.new_zeros(self.gate_up_proj.shape[0]).scatter_add_(0, flat, torch.ones_like(flat))
        offs = counts.cumsum(0).to(torch.int32)
        gate_up = F.grouped_mm(x[token], self.gate_up_proj.transpose(1, 2), offs=offs)  # (N*k, 2I)
        gate, up = gate_up.chunk(2, dim=-1)
        y = F.grouped_mm(F.silu(gate) * up, self.down_proj.transpose(1, 2), offs=offs)  # (N*k, dim)
        y = y * weights.flatten()[order, None]
        return torch.zeros_like(x).index_add_(0, token, y.to(x.dtype))


class TalkerMoE(nn.Module):
    """routed(x) + sigmoid(shared_expert_gate(x)) * shared_expert(x)."""

    def __init__(
        self, dim: int, num_experts: int, top_k: int, intermediate: int, shared_intermediate: int, norm_topk_prob: bool
    ) -> None:
        super().__init__()
        self.gate = Router(dim, num_experts, top_k, norm_topk_prob)
        self.experts = RoutedExperts(dim, num_experts, intermediate)
        self.shared_expert = SwiGLU(dim, shared_intermediate)
        self.shared_expert_gate = nn.Linear(dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (..., dim) -> (N, dim)
        weights, ids = self.gate(flat)
        routed = self.experts(flat, weights, ids)
        shared = torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return (routed + shared).reshape(shape)
