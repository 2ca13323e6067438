"""What rank r of N holds: its attention heads, KV heads and MLP / expert width, and the per-rank ThinkerConfig.

Heads are split in contiguous blocks. KV heads are split the same way when there are at least as many as ranks;
with fewer (N a multiple of num_kv_heads), each rank keeps the one KV head its query heads read (replicated on
N / num_kv_heads ranks), since GQA groups are contiguous.

Qwen3.5's Gated-DeltaNet layers split by key heads, each rank taking the value heads its key heads serve (value head
j reads key head j // (Hv / Hk), so contiguous blocks of both line up), and with them their conv channels and state."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from runtime.config_section import ConfigError
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_config import HybridConfig

FIELD = "thinker.tensor_parallel"


class Span(NamedTuple):
    start: int
    stop: int


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    cfg: ThinkerConfig  # the checkpoint's full config
    rank: int
    world: int

    @property
    def num_heads(self) -> int:
        return self.cfg.num_heads // self.world

    @property
    def num_kv_heads(self) -> int:
        return max(1, self.cfg.num_kv_heads // self.world)

    @property
    def q_rows(self) -> Span:
        """Rows of q_proj (and columns of o_proj) this rank holds: its heads times head_dim."""
        d = self.cfg.head_dim
        return Span(self.rank * self.num_heads * d, (self.rank + 1) * self.num_heads * d)

    @property
    def kv_rows(self) -> Span:
        """Rows of k_proj / v_proj: this rank's KV heads, or the one KV head its query heads share."""
        first = self.rank * self.cfg.num_kv_heads // self.world  # == rank * num_kv_heads when they split evenly
        d = self.cfg.head_dim
        return Span(first * d, (first + self.num_kv_heads) * d)

    @property
    def gated_q_rows(self) -> Span:
        """Rows of a gated attention's q_proj: per head its query then its gate, so twice q_rows."""
        return Span(2 * self.q_rows.start, 2 * self.q_rows.stop)

    @property
    def linear_key_rows(self) -> Span:
        """A Gated-DeltaNet layer's q (or k) channels of this rank's key heads."""
        h = self._hybrid
        per_rank = h.num_key_heads // self.world * h.key_head_dim
        return Span(self.rank * per_rank, (self.rank + 1) * per_rank)

    @property
    def linear_value_heads(self) -> Span:
        """The value heads this rank's key heads serve (rows of in_proj_b / in_proj_a, A_log, dt_bias)."""
        per_rank = self._hybrid.num_value_heads // self.world
        return Span(self.rank * per_rank, (self.rank + 1) * per_rank)

    @property
    def linear_value_rows(self) -> Span:
        """Those value heads' channels: rows of in_proj_z, columns of out_proj."""
        d = self._hybrid.value_head_dim
        heads = self.linear_value_heads
        return Span(heads.start * d, heads.stop * d)

    @property
    def conv_channels(self) -> tuple[Span, Span, Span]:
        """The rank's rows of in_proj_qkv and conv1d (the conv is per channel): its q, k and v channels, where the
        whole layer lays them out as [q | k | v]."""
        h, keys, values = self._hybrid, self.linear_key_rows, self.linear_value_rows
        return (keys, Span(h.key_dim + keys.start, h.key_dim + keys.stop),
                Span(2 * h.key_dim + values.start, 2 * h.key_dim + values.stop))

    @property
    def _hybrid(self) -> HybridConfig:
        assert self.cfg.hybrid is not None, "a Gated-DeltaNet span of a model without linear layers"
        return self.cfg.hybrid

    @property
    def shared_expert_cols(self) -> Span:
        """This rank's slice of a Qwen3.5-MoE shared expert's intermediate dim."""
        width = self.cfg.shared_expert_intermediate_size // self.world
        return Span(self.rank * width, (self.rank + 1) * width)

    @property
    def expert_cols(self) -> Span:
        """This rank's slice of every expert's intermediate dim."""
        width = self.cfg.moe_intermediate_size // self.world
        return Span(self.rank * width, (self.rank + 1) * width)

    @property
    def dense_cols(self) -> Span:
        """This rank's slice of a dense MLP's intermediate dim."""
        width = self.cfg.intermediate_size // self.world
        return Span(self.rank * width, (self.rank + 1) * width)

    @property
    def shard_config(self) -> ThinkerConfig:
        """The config a rank's modules are built from: the same model with its share of heads and widths."""
        hybrid = self.cfg.hybrid
        if hybrid is not None:  # its state cache and projections are then the rank's too
            hybrid = dataclasses.replace(hybrid, num_key_heads=hybrid.num_key_heads // self.world,
                                         num_value_heads=hybrid.num_value_heads // self.world)
        return dataclasses.replace(
            self.cfg, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
            moe_intermediate_size=self.cfg.moe_intermediate_size // self.world,
            intermediate_size=self.cfg.intermediate_size // self.world,
            shared_expert_intermediate_size=self.cfg.shared_expert_intermediate_size // self.world, hybrid=hybrid)


def check_splits(cfg: ThinkerConfig, world: int) -> None:
    """Raises ConfigError naming thinker.tensor_parallel and the checkpoint field `world` does not split."""
    def refuse(field: str, value: int, why: str) -> None:
        raise ConfigError(f"config field {FIELD}={world} is invalid for this checkpoint: text_config.{field} "
                          f"({value}) {why}")

    if cfg.num_heads % world:
        refuse("num_attention_heads", cfg.num_heads, f"is not divisible by {world}")
    if cfg.num_kv_heads % world and world % cfg.num_kv_heads:
        refuse("num_key_value_heads", cfg.num_kv_heads,
               f"neither divides nor is divided by {world}: each rank needs whole KV heads, or one shared")
    if cfg.num_experts and cfg.moe_intermediate_size % world:
        refuse("moe_intermediate_size", cfg.moe_intermediate_size, f"is not divisible by {world}")
    if cfg.num_experts and cfg.shared_expert_intermediate_size % world:
        refuse("shared_expert_intermediate_size", cfg.shared_expert_intermediate_size, f"is not divisible by {world}")
    # whole key heads per rank, each with the value heads it serves (a multiple of the key heads, so they split too)
    if cfg.hybrid is not None and cfg.hybrid.num_key_heads % world:
        refuse("linear_num_key_heads", cfg.hybrid.num_key_heads, f"is not divisible by {world}: each rank needs "
               "whole Gated-DeltaNet key heads, with the value heads each serves")
    dense = [i for i in range(cfg.num_layers) if not cfg.is_moe_layer(i)]
    if dense and cfg.intermediate_size % world:
        refuse("intermediate_size", cfg.intermediate_size, f"(the dense MLP of layers {dense}) is not divisible "
               f"by {world}")


def plan_rank(cfg: ThinkerConfig, rank: int, world: int) -> ShardPlan:
    check_splits(cfg, world)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in 0..{world - 1}")
    return ShardPlan(cfg, rank, world)
