"""ThinkerLM split over tensor-parallel ranks: the same decoder built from the rank's config (its heads, KV heads
and widths), whose row-parallel ends all-reduce, and a forward that first takes rank 0's inputs.

Every rank runs `forward` on the same inputs: rank 0 broadcasts x (embeddings with media rows already in), the
positions, the attention context and the deepstack features, so workers need no embedding table, tokenizer or
scheduler; only rank 0 holds embed_tokens and lm_head (logits are computed once, where the sampler runs)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from runtime.attention import AttentionContext
from services.thinker.model.kernel_path import build_from_state
from services.thinker.model.lm import DeepstackInput, LMOutput, ThinkerLM
from services.thinker.model.mlp import DenseMLP
from services.thinker.parallel.collectives import RankGroup
from services.thinker.parallel.layers import ParallelDenseMLP, ParallelSparseMoE, RowParallelLinear
from services.thinker.parallel.messages import EagerStep
from services.thinker.parallel.plan import ShardPlan
from services.thinker.parallel.shard_load import load_rank_state_dict

if TYPE_CHECKING:
    from services.thinker.parallel.driver import RankDriver


class ShardedThinkerLM(ThinkerLM):
    def __init__(self, plan: ShardPlan, group: RankGroup) -> None:
        cfg = plan.shard_config
        super().__init__(cfg)
        self.plan = plan
        self.group = group
        self.driver: RankDriver | None = None  # rank 0's: tells the workers each step
        self._quiet = False
        for layer in self.layers:
            attn = layer.self_attn
            attn.o_proj = RowParallelLinear(attn.o_proj.in_features, attn.o_proj.out_features,
                                            attn.o_proj.bias is not None, group)
            if isinstance(layer.mlp, DenseMLP):
                layer.mlp = ParallelDenseMLP(cfg.hidden_size, cfg.intermediate_size, group)
            else:
                layer.mlp = ParallelSparseMoE(cfg, group)
        if plan.rank != 0:
            self.embed_tokens = None  # type: ignore[assignment]
            self.lm_head = None  # type: ignore[assignment]

    @classmethod
    def load_shard(cls, ckpt_dir: Path | str, plan: ShardPlan, group: RankGroup, device: torch.device,
                   dtype: torch.dtype, use_kernels: bool | None = None) -> ShardedThinkerLM:
        """The rank's shard read from the checkpoint (only its slices) onto `device`; `use_kernels` as in
        ThinkerLM.load."""
        state = load_rank_state_dict(ckpt_dir, plan, device, dtype)
        return build_from_state(lambda: cls(plan, group), state, device, use_kernels, dtype)  # workers have no head

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Forwards that every rank runs on its own (graph warm-ups and captures) are not announced."""
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext, kv_caches: list[torch.Tensor],
                deepstack: DeepstackInput | None = None, capture_layer: int | None = None) -> LMOutput:
        """ThinkerLM.forward on every rank, after rank 0's inputs reach the workers (their own are overwritten)."""
        if deepstack is not None and not deepstack.features:
            deepstack = None  # nothing to add: the workers must not wait for its rows
        if self.driver is not None and not self._quiet:
            self.driver.send(EagerStep(
                x.shape[0], ctx.block_size, ctx.block_tables.shape[1], list(ctx.q_lens_host), list(ctx.kv_lens_host),
                deepstack.row_index.shape[0] if deepstack is not None else 0,
                len(deepstack.features) if deepstack is not None else 0))
        share = self.group.broadcast
        for t in (x, positions, ctx.cu_seqlens_q, ctx.kv_lens, ctx.slot_mapping, ctx.block_tables):
            share(t)
        if deepstack is not None:
            share(deepstack.row_index)
            for level in deepstack.features:
                share(level)
        return super().forward(x, positions, ctx, kv_caches, deepstack, capture_layer)

    def step_inputs(self, step: EagerStep, device: torch.device, dtype: torch.dtype
                    ) -> tuple[torch.Tensor, torch.Tensor, AttentionContext, DeepstackInput | None]:  # fmt: skip
        """A worker's empty tensors of an announced step's shapes, for `forward` to fill from rank 0."""
        t, b = step.num_tokens, len(step.q_lens)
        x = torch.empty(t, self.cfg.hidden_size, dtype=dtype, device=device)
        positions = torch.empty(3, t, dtype=torch.long, device=device)
        ctx = AttentionContext(
            cu_seqlens_q=torch.empty(b + 1, dtype=torch.int32, device=device),
            kv_lens=torch.empty(b, dtype=torch.int32, device=device),
            slot_mapping=torch.empty(t, dtype=torch.int64, device=device),
            block_tables=torch.empty(b, step.max_blocks, dtype=torch.int32, device=device),
            block_size=step.block_size, q_lens_host=list(step.q_lens), kv_lens_host=list(step.kv_lens))
        deepstack = None
        if step.deepstack_levels:
            m = step.deepstack_rows
            deepstack = DeepstackInput(
                row_index=torch.empty(m, dtype=torch.long, device=device),
                features=[torch.empty(m, self.cfg.hidden_size, dtype=dtype, device=device)
                          for _ in range(step.deepstack_levels)])
        return x, positions, ctx, deepstack

