"""What rank r of N holds: its attention heads, KV heads and MLP / expert width, and the per-rank ThinkerConfig.

Heads are split in contiguous blocks. KV heads are split the same way when there are at least as many as ranks;
with fewer (N a multiple of num_kv_heads), each rank keeps the one KV head its query heads read (replicated on
N / num_kv_heads ranks), since GQA groups are contiguous."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from runtime.config_section import ConfigError
from services.thinker.model.config import ThinkerConfig

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
        return dataclasses.replace(
            self.cfg, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
            moe_intermediate_size=self.cfg.moe_intermediate_size // self.world,
            intermediate_size=self.cfg.intermediate_size // self.world)


def check_splits(cfg: ThinkerConfig, world: int) -> None:
    """Raises ConfigError naming thinker.tensor_parallel and the checkpoint field `world` does not split."""
    def refuse(field: str, value: int, why: str) -> None:
        raise ConfigError(f"config field {FIELD}={world} is invalid for this checkpoint: text_config.{field} "
                          f"({value}) {why}")

    if cfg.hybrid is not None:
        raise ConfigError(f"config field {FIELD}={world} is invalid for this checkpoint: Qwen3.5's hybrid LM "
                          "(Gated DeltaNet layers) is not split over ranks; use 1")
    if cfg.num_heads % world:
        refuse("num_attention_heads", cfg.num_heads, f"is not divisible by {world}")
    if cfg.num_kv_heads % world and world % cfg.num_kv_heads:
        refuse("num_key_value_heads", cfg.num_kv_heads,
               f"neither divides nor is divided by {world}: each rank needs whole KV heads, or one shared")
    if cfg.num_experts and cfg.moe_intermediate_size % world:
        refuse("moe_intermediate_size", cfg.moe_intermediate_size, f"is not divisible by {world}")
    dense = [i for i in range(cfg.num_layers) if not cfg.is_moe_layer(i)]
    if dense and cfg.intermediate_size % world:
        refuse("intermediate_size", cfg.intermediate_size, f"(the dense MLP of layers {dense}) is not divisible "
               f"by {world}")


def plan_rank(cfg: ThinkerConfig, rank: int, world: int) -> ShardPlan:
    check_splits(cfg, world)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in 0..{world - 1}")
    return ShardPlan(cfg, rank, world)
