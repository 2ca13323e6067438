"""What each rank holds: head, KV-head and width spans, the per-rank config, the refusals naming the field, and the
thinker.tensor_parallel config key."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from runtime.config import load_mesh_config
from runtime.config_section import ConfigError
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_config import HybridConfig
from services.thinker.parallel.launch import load_parallel_thinker, rank_devices
from services.thinker.parallel.plan import Span, plan_rank
from tests.unit.thinker_model.thinker_tiny_config import tiny_config


def test_heads_and_widths_split_in_contiguous_blocks() -> None:
    cfg = tiny_config()  # 4 heads of 8, 2 KV heads, experts 16 wide, dense 48 wide
    plans = [plan_rank(cfg, r, 2) for r in range(2)]
    assert [p.q_rows for p in plans] == [Span(0, 16), Span(16, 32)]
    assert [p.kv_rows for p in plans] == [Span(0, 8), Span(8, 16)]
    assert [p.expert_cols for p in plans] == [Span(0, 8), Span(8, 16)]
    assert [p.dense_cols for p in plans] == [Span(0, 24), Span(24, 48)]
    shard = plans[1].shard_config
    assert (shard.num_heads, shard.num_kv_heads, shard.moe_intermediate_size, shard.intermediate_size) == (2, 1, 8, 24)
    assert shard.num_query_groups == cfg.num_query_groups and shard.vocab_size == cfg.vocab_size


def test_fewer_kv_heads_than_ranks_keeps_the_one_each_ranks_queries_read() -> None:
    cfg = tiny_config()  # GQA groups: query heads 0-1 read KV head 0, 2-3 read KV head 1
    plans = [plan_rank(cfg, r, 4) for r in range(4)]
    assert [p.q_rows for p in plans] == [Span(0, 8), Span(8, 16), Span(16, 24), Span(24, 32)]
    assert [p.kv_rows for p in plans] == [Span(0, 8), Span(0, 8), Span(8, 16), Span(8, 16)]
    assert plans[3].shard_config.num_kv_heads == 1


@pytest.mark.parametrize(("overrides", "world", "field"), [
    ({}, 3, "num_attention_heads (4) is not divisible by 3"),
    ({"num_attention_heads": 6, "num_key_value_heads": 3}, 2, "num_key_value_heads (3) neither divides"),
    ({"moe_intermediate_size": 10}, 4, "moe_intermediate_size (10) is not divisible by 4"),
    ({"intermediate_size": 50, "mlp_only_layers": [1]}, 4, "intermediate_size (50) (the dense MLP of layers [1])"),
])
def test_a_split_the_checkpoint_cannot_take_is_refused_naming_both_fields(overrides: dict, world: int,
                                                                           field: str) -> None:
    with pytest.raises(ConfigError) as info:
        plan_rank(tiny_config(**overrides), 0, world)
    message = str(info.value)
    assert message.startswith(f"config field thinker.tensor_parallel={world} is invalid") and field in message


def test_a_dense_width_no_layer_uses_is_not_checked() -> None:
    assert plan_rank(tiny_config(intermediate_size=50), 0, 2).world == 2  # every layer is MoE


def _hybrid(**changes: int) -> ThinkerConfig:
    """tiny_config with Gated-DeltaNet layers: 2 key heads of 8, 4 value heads of 4 (value heads 0-1 read key head
    0), conv over q, k, v channels [0, 16) [16, 32) [32, 48); a shared expert 12 wide."""
    hybrid = HybridConfig(("linear_attention", "full_attention"), 4, 2, 4, 8, 4)
    return dataclasses.replace(tiny_config(), hybrid=dataclasses.replace(hybrid, **changes),
                               shared_expert_intermediate_size=12)


def test_a_hybrid_model_splits_deltanet_heads_with_their_value_heads_and_conv_channels() -> None:
    plans = [plan_rank(_hybrid(), r, 2) for r in range(2)]
    assert [p.linear_key_rows for p in plans] == [Span(0, 8), Span(8, 16)]
    assert [p.linear_value_heads for p in plans] == [Span(0, 2), Span(2, 4)]  # the value heads each key head serves
    assert [p.linear_value_rows for p in plans] == [Span(0, 8), Span(8, 16)]
    assert plans[1].conv_channels == (Span(8, 16), Span(24, 32), Span(40, 48))
    assert [p.gated_q_rows for p in plans] == [Span(0, 32), Span(32, 64)]  # per head: query and gate
    assert [p.shared_expert_cols for p in plans] == [Span(0, 6), Span(6, 12)]
    shard = plans[1].shard_config
    assert (shard.hybrid.num_key_heads, shard.hybrid.num_value_heads, shard.hybrid.conv_dim) == (1, 2, 24)
    assert shard.shared_expert_intermediate_size == 6 and shard.hybrid.layer_types == _hybrid().hybrid.layer_types


@pytest.mark.parametrize(("cfg", "world", "field"), [
    (_hybrid(num_key_heads=1, num_value_heads=4), 2, "linear_num_key_heads (1) is not divisible by 2"),
    (_hybrid(), 4, "linear_num_key_heads (2) is not divisible by 4"),
    (dataclasses.replace(_hybrid(), shared_expert_intermediate_size=10), 4,
     "shared_expert_intermediate_size (10) is not divisible by 4"),
])
def test_a_hybrid_split_the_checkpoint_cannot_take_is_refused_naming_both_fields(cfg: ThinkerConfig, world: int,
                                                                                 field: str) -> None:
    with pytest.raises(ConfigError) as info:
        plan_rank(cfg, 0, world)
    message = str(info.value)
    assert message.startswith(f"config field thinker.tensor_parallel={world} is invalid") and field in message


def test_the_qwen3_5_demo_is_refused_at_load_past_its_key_heads(qwen3_5_ckpt: Path) -> None:
    """Before any worker starts: 4 attention heads split over 4 ranks, its 2 Gated-DeltaNet key heads do not."""
    with pytest.raises(ConfigError, match=r"thinker.tensor_parallel=4 .* text_config.linear_num_key_heads \(2\)"):
        load_parallel_thinker(qwen3_5_ckpt, 4, torch.device("cpu"), torch.float32, cpu_threads=1, timeout_s=5)


def test_a_rank_outside_the_group_is_refused() -> None:
    with pytest.raises(ValueError, match="rank 2 is not in 0..1"):
        plan_rank(tiny_config(), 2, 2)


def test_the_config_key_is_strict_and_keeps_replicas_gpus_apart() -> None:
    assert load_mesh_config(None, {}).thinker.tensor_parallel == 1
    assert load_mesh_config(None, {"thinker.tensor_parallel": 2}).thinker.tensor_parallel == 2
    with pytest.raises(ConfigError, match="thinker.tensor_parallel=0 is invalid"):
        load_mesh_config(None, {"thinker.tensor_parallel": 0})
    apart = {"thinker.tensor_parallel": 2, "thinker.replicas": 2, "thinker.devices": ["cuda:0", "cuda:2"]}
    assert load_mesh_config(None, apart).thinker.devices == ("cuda:0", "cuda:2")
    with pytest.raises(ConfigError, match=r"thinker.devices=.* ranks take the GPUs from its device on"):
        load_mesh_config(None, {**apart, "thinker.devices": ["cuda:1", "cuda"]})


def test_ranks_take_the_gpus_after_rank_0s_or_all_share_the_cpu() -> None:
    assert rank_devices(torch.device("cuda", 2), 2) == [torch.device("cuda", 2), torch.device("cuda", 3)]
    assert rank_devices(torch.device("cpu"), 3) == [torch.device("cpu")] * 3
