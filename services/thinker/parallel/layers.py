"""The decoder's modules that end a tensor-parallel split: each computes its rank's partial output and sums it over
the ranks (one all-reduce). What comes before them (q/k/v by heads, gate/up by width) needs no communication."""
from __future__ import annotations

import torch
from torch import nn

from services.thinker.model.config import ThinkerConfig
from services.thinker.model.mlp import DenseMLP
from services.thinker.model.moe import SparseMoE
from services.thinker.model.shared_moe import SharedExpertMoE
from services.thinker.parallel.collectives import RankGroup


class RowParallelLinear(nn.Linear):
    """o_proj over this rank's heads: x [T, Hq/N * D] @ its columns -> a partial [T, H], summed over the ranks.
    A bias is held whole by rank 0 and zero elsewhere (shard_load), so it is added once."""

    def __init__(self, in_features: int, out_features: int, bias: bool, group: RankGroup) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(super().forward(x))


class ParallelDenseMLP(DenseMLP):
    """SwiGLU over this rank's slice of the intermediate dim (gate/up rows, down columns), summed over the ranks."""

    def __init__(self, hidden_size: int, intermediate_size: int, group: RankGroup) -> None:
        super().__init__(hidden_size, intermediate_size)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(super().forward(x))

    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(super().forward_fused(x))


class ParallelSparseMoE(SparseMoE):
    """Experts split by tensor: every rank holds every expert's slice of the intermediate dim and routes every token
    (router replicated, identical input, so identical routing); the weighted combine is linear in the slices, so
    one all-reduce after it gives the whole MoE output. Still a SparseMoE, so the fused decoder path keeps its
    norm + router kernel."""

    def __init__(self, cfg: ThinkerConfig, group: RankGroup) -> None:
        super().__init__(cfg)  # cfg is the rank's: moe_intermediate_size already divided
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(super().forward(x))

    def forward_fused(self, x: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        return self.group.all_reduce(super().forward_fused(x, logits))


class ParallelSharedExpertMoE(SharedExpertMoE):
    """Qwen3.5-MoE's block split like ParallelSparseMoE, its shared expert by width too (gate/up rows, down
    columns). The shared expert's gate is one scalar per token, computed whole on every rank (its weight is
    replicated): sigmoid(gate) times the rank's partial shared output sums over the ranks to the whole term, so the
    routed and shared partials still take one all-reduce together."""

    def __init__(self, cfg: ThinkerConfig, group: RankGroup) -> None:
        super().__init__(cfg)  # the rank's cfg: moe_ and shared_expert_intermediate_size already divided
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(super().forward(x))

    def forward_fused(self, x: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        return self.group.all_reduce(super().forward_fused(x, logits))
