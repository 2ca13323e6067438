"""Qwen3.5-MoE's block: the routed experts (SparseMoE) plus an always-on shared expert scaled by
sigmoid(shared_expert_gate(x))."""
from __future__ import annotations

import torch
from torch import nn

from runtime.kernels.fused_moe import SharedExpert, fused_moe, routed_moe
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.mlp import DenseMLP
from services.thinker.model.moe import SparseMoE


class SharedExpertMoE(SparseMoE):
    def __init__(self, cfg: ThinkerConfig) -> None:
        super().__init__(cfg)
        self.shared_expert = DenseMLP(cfg.hidden_size, cfg.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)
        self._fused_shared: SharedExpert | None = None  # built on the first GPU-path call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        shared = torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return super().forward(x) + shared

    def forward_fused(self, x: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        """runtime.kernels' fused MoE with the shared expert folded into the same call; logits: the router's, when
        already computed."""
        if self._fused_shared is None:
            mlp = self.shared_expert
            if mlp.gate_up_weight is None:
                mlp.fuse_gate_up()  # its [gate; up] rows become the one copy, as for a dense layer
            self._fused_shared = SharedExpert(mlp.gate_up_weight, mlp.down_proj.weight, self.shared_expert_gate.weight)
        if logits is None:
            return fused_moe(x, self.gate.weight, self.gate_up_proj, self.down_proj, self.top_k,
                             self.norm_topk_prob, shared=self._fused_shared)
        return routed_moe(x, logits, self.gate_up_proj, self.down_proj, self.top_k, self.norm_topk_prob,
                          shared=self._fused_shared)
