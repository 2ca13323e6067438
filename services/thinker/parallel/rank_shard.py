"""What both sharded LMs (ShardedThinkerLM, ShardedHybridLM) do before their forward: rank 0 announces the step to
the workers and broadcasts its inputs; a worker makes empty tensors of the announced shapes for that broadcast to
fill. Every rank then runs the same decoder on the same inputs, so workers need no embedding table, tokenizer or
scheduler."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Self

import torch

from runtime.attention import AttentionContext
from runtime.kernels.causal_conv import conv_prefill_plan
from runtime.transfer import to_device
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.kernel_path import build_from_state
from services.thinker.model.linear_state import LinearStateCache, StateContext
from services.thinker.model.lm import DeepstackInput
from services.thinker.parallel.collectives import RankGroup
from services.thinker.parallel.messages import EagerStep, StateStep
from services.thinker.parallel.plan import ShardPlan
from services.thinker.parallel.shard_load import load_rank_state_dict

if TYPE_CHECKING:
    from services.thinker.parallel.driver import RankDriver


class StepInputs(NamedTuple):
    x: torch.Tensor
    positions: torch.Tensor
    ctx: AttentionContext
    deepstack: DeepstackInput | None
    states: StateContext | None


class RankShard:
    """Mixed into an LM module; `init_rank` sets it up after the module's own __init__."""

    cfg: ThinkerConfig  # the rank's (plan.shard_config), set by the LM module
    plan: ShardPlan
    group: RankGroup
    driver: RankDriver | None

    def init_rank(self, plan: ShardPlan, group: RankGroup) -> None:
        self.plan = plan
        self.group = group
        self.driver = None  # rank 0's: tells the workers each step
        self._quiet = False

    def drop_head_off_rank0(self) -> None:
        """Only rank 0 holds embed_tokens and lm_head: it embeds the step's tokens and computes the logits once,
        where the sampler runs."""
        if self.plan.rank != 0:
            self.embed_tokens = None
            self.lm_head = None

    @classmethod
    def load_shard(cls, ckpt_dir: Path | str, plan: ShardPlan, group: RankGroup, device: torch.device,
                   dtype: torch.dtype, use_kernels: bool | None = None) -> Self:
        """The rank's shard read from the checkpoint (only its slices) onto `device`; `use_kernels` as in the
        LM's own `load`."""
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

    def announce(self, msg: object) -> bool:
        """Sends `msg` to the workers when this is rank 0 outside `quiet`; -> whether it did (then the workers
        take part in whatever collective follows)."""
        if self.driver is None or self._quiet:
            return False
        self.driver.send(msg)
        return True

    def share_step(self, x: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext,
                   deepstack: DeepstackInput | None, states: StateContext | None) -> None:
        """Rank 0's inputs into every rank's (the workers' are overwritten), after announcing their shapes."""
        self.announce(EagerStep(
            x.shape[0], ctx.block_size, ctx.block_tables.shape[1], list(ctx.q_lens_host), list(ctx.kv_lens_host),
            deepstack.row_index.shape[0] if deepstack is not None else 0,
            len(deepstack.features) if deepstack is not None else 0,
            StateStep(states.decode_rows.shape[0], list(states.prefill)) if states is not None else None))
        share = self.group.broadcast
        for t in (x, positions, ctx.cu_seqlens_q, ctx.kv_lens, ctx.slot_mapping, ctx.block_tables):
            share(t)
        if deepstack is not None:
            share(deepstack.row_index)
            for level in deepstack.features:
                share(level)
        if states is not None and states.decode_rows.numel():  # the prefill rows the workers derive from `prefill`
            share(states.decode_rows)
            share(states.decode_slots)

    def step_inputs(self, step: EagerStep, device: torch.device, dtype: torch.dtype,
                    cache: LinearStateCache | None = None) -> StepInputs:
        """A worker's empty tensors of an announced step's shapes, for `share_step` to fill from rank 0; `cache`:
        the worker's state slots, for a hybrid model's step."""
        t, b, hidden_size = step.num_tokens, len(step.q_lens), self.cfg.hidden_size
        x = torch.empty(t, hidden_size, dtype=dtype, device=device)
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
                features=[torch.empty(m, hidden_size, dtype=dtype, device=device)
                          for _ in range(step.deepstack_levels)])
        states = None
        if step.states is not None:
            assert cache is not None, "a hybrid step before the worker's state slots were allocated"
            states = _state_context(step.states, cache, device)
        return StepInputs(x, positions, ctx, deepstack, states)


def _state_context(step: StateStep, cache: LinearStateCache, device: torch.device) -> StateContext:
    """The worker's StateContext of rank 0's: decode rows and slots to be broadcast into, prefill rows and their
    conv plan built from the host list as build_state_context builds them (slots were zeroed by StateReset)."""
    n = step.num_decode
    decode_rows = torch.empty(n, dtype=torch.long, device=device)
    decode_slots = torch.empty(n, dtype=torch.long, device=device)
    rows = [i for start, count, _ in step.prefill for i in range(start, start + count)]
    prefill_rows = to_device(torch.tensor(rows, dtype=torch.long), device)  # pinned: no sync with the step before
    plan = conv_prefill_plan([count for _, count, _ in step.prefill], [slot for _, _, slot in step.prefill],
                             cache.conv.shape[-1] + 1, device) if step.prefill else None
    return StateContext(cache, decode_rows, decode_slots, list(step.prefill), prefill_rows, plan)
