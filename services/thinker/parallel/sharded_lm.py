"""ThinkerLM split over tensor-parallel ranks: the same decoder built from the rank's config (its heads, KV heads
and widths), whose row-parallel ends all-reduce, and a forward that first takes rank 0's inputs.

Every rank runs `forward` on the same inputs: rank 0 broadcasts x (embeddings with media rows already in), the
positions, the attention context and the deepstack features (rank_shard.py), so workers need no embedding table,
tokenizer or scheduler; only rank 0 holds embed_tokens and lm_head (logits are computed once, where the sampler
runs)."""
from __future__ import annotations


import torch

from runtime.attention import AttentionContext
from services.thinker.model.lm import DeepstackInput, LMOutput, ThinkerLM
from services.thinker.model.mlp import DenseMLP
from services.thinker.parallel.collectives import RankGroup
from services.thinker.parallel.layers import ParallelDenseMLP, ParallelSparseMoE, RowParallelLinear
from services.thinker.parallel.plan import ShardPlan
from services.thinker.parallel.rank_shard import RankShard


class ShardedThinkerLM(RankShard, ThinkerLM):
    def __init__(self, plan: ShardPlan, group: RankGroup) -> None:
        cfg = plan.shard_config
        super().__init__(cfg)
        self.init_rank(plan, group)
        for layer in self.layers:
            attn = layer.self_attn
            attn.o_proj = RowParallelLinear(attn.o_proj.in_features, attn.o_proj.out_features,
                                            attn.o_proj.bias is not None, group)
            if isinstance(layer.mlp, DenseMLP):
                layer.mlp = ParallelDenseMLP(cfg.hidden_size, cfg.intermediate_size, group)
            else:
                layer.mlp = ParallelSparseMoE(cfg, group)
        self.drop_head_off_rank0()

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext, kv_caches: list[torch.Tensor],
                deepstack: DeepstackInput | None = None, capture_layer: int | None = None) -> LMOutput:
        """ThinkerLM.forward on every rank, after rank 0's inputs reach the workers (their own are overwritten)."""
        if deepstack is not None and not deepstack.features:
            deepstack = None  # nothing to add: the workers must not wait for its rows
        self.share_step(x, positions, ctx, deepstack, None)
        return super().forward(x, positions, ctx, kv_caches, deepstack, capture_layer)
