"""Qwen3.5's HybridLM split over tensor-parallel ranks, on ShardedThinkerLM's design: the decoder built from the
rank's config, its row-parallel ends all-reduced, rank 0's inputs broadcast before each forward (rank_shard.py).

Per layer: a Gated-DeltaNet layer holds its rank's key heads and the value heads they serve (their rows of
in_proj_qkv / z / b / a, conv channels, A_log and dt_bias; the gated norm is per head, so it stays local) and sums
out_proj's partials; a gated-attention layer holds its query heads (q_proj rows with their gates) and KV heads and
sums o_proj's; the dense MLP and the shared-expert MoE split by width. Each rank keeps its heads' share of every
state slot under rank 0's slot ids (mirrored_states.py)."""
from __future__ import annotations


import torch

from runtime.attention import AttentionContext
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.linear_state import StateContext
from services.thinker.model.lm import DeepstackInput, LMOutput
from services.thinker.model.shared_moe import SharedExpertMoE
from services.thinker.parallel.collectives import RankGroup
from services.thinker.parallel.layers import ParallelDenseMLP, ParallelSharedExpertMoE, RowParallelLinear
from services.thinker.parallel.mirrored_states import MirroredStateCache
from services.thinker.parallel.plan import ShardPlan
from services.thinker.parallel.rank_shard import RankShard


def _row_parallel(linear: torch.nn.Linear, group: RankGroup) -> RowParallelLinear:
    return RowParallelLinear(linear.in_features, linear.out_features, linear.bias is not None, group)


class ShardedHybridLM(RankShard, HybridLM):
    def __init__(self, plan: ShardPlan, group: RankGroup) -> None:
        cfg = plan.shard_config
        super().__init__(cfg)
        self.init_rank(plan, group)
        for layer in self.layers:
            if layer.is_linear:
                layer.linear_attn.out_proj = _row_parallel(layer.linear_attn.out_proj, group)
            else:
                layer.self_attn.o_proj = _row_parallel(layer.self_attn.o_proj, group)
            if isinstance(layer.mlp, SharedExpertMoE):
                layer.mlp = ParallelSharedExpertMoE(cfg, group)
            else:
                layer.mlp = ParallelDenseMLP(cfg.hidden_size, cfg.intermediate_size, group)
        self.drop_head_off_rank0()

    def allocate_states(self, num_slots: int, device: torch.device | str) -> MirroredStateCache:
        """The rank's share of every slot (its heads' conv channels and recurrent state); on rank 0, changes made
        outside a forward reach the workers' slots too."""
        assert self.cfg.hybrid is not None
        return MirroredStateCache(self.cfg.hybrid, num_slots, self.norm.weight.dtype, device, self.announce,
                                  self.group)

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Rank 0 embeds; a worker (no table) gives a buffer of the same shape, which the forward's broadcast of
        rank 0's x fills: what the graph warm-ups and captures, run on every rank alike, pass in."""
        if self.embed_tokens is not None:
            return super().embed(token_ids)
        weight = self.norm.weight
        return torch.empty(token_ids.shape[0], self.cfg.hidden_size, dtype=weight.dtype, device=weight.device)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext, kv_caches: list[torch.Tensor],
                deepstack: DeepstackInput | None = None, capture_layer: int | None = None,
                states: StateContext | None = None) -> LMOutput:
        """HybridLM.forward on every rank, after rank 0's inputs and state rows reach the workers."""
        if states is None or deepstack is not None:  # refused before the workers are told, so they never wait
            return super().forward(x, positions, ctx, kv_caches, deepstack, capture_layer, states)
        self.share_step(x, positions, ctx, None, states)
        return super().forward(x, positions, ctx, kv_caches, None, capture_layer, states)
