"""CPU tests of the MoE reference (parity with transformers' MoE blocks), the torch grouping and the config lookup."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.unit.kernels.kernel_data import check_alignment, skewed_routing
from runtime.kernels.fused_moe import SharedExpert, fused_moe, fused_moe_reference
from runtime.kernels.moe_align import align_torch
from runtime.kernels.moe_config import (
    CONFIG_DIR, SMALL_DOWN, SMALL_GATE_UP, SMALL_PATH_MAX_TOKENS, GemmConfig, MoeConfig, config_from_json,
    config_to_json, default_config, load_tuned, moe_config, shape_key,
)

modeling = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
configuration = pytest.importorskip("transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe")


def randomize(module: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_reference_matches_transformers_thinker_block(norm_topk_prob: bool) -> None:
    cfg = configuration.Qwen3OmniMoeTextConfig(
        hidden_size=32, moe_intermediate_size=16, num_experts=8, num_experts_per_tok=3, norm_topk_prob=norm_topk_prob
    )
    block = modeling.Qwen3OmniMoeThinkerTextSparseMoeBlock(cfg).eval()
    randomize(block, 0)
    x = torch.randn(11, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = block(x[None])[0]
        out = fused_moe_reference(
            x, block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj, 3, norm_topk_prob
        )
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_reference_matches_transformers_talker_block_with_shared_expert() -> None:
    cfg = configuration.Qwen3OmniMoeTalkerTextConfig(
        hidden_size=32, moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        shared_expert_intermediate_size=24,
    )
    block = modeling.Qwen3OmniMoeTalkerTextSparseMoeBlock(cfg).eval()
    randomize(block, 2)
    x = torch.randn(9, 32, generator=torch.Generator().manual_seed(3))
    mlp = block.shared_expert
    shared = SharedExpert(
        torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), mlp.down_proj.weight, block.shared_expert_gate.weight
    )
    with torch.no_grad():
        expected = block(x[None])[0]
        out = fused_moe(x, block.gate.weight, block.experts.gate_up_proj, block.experts.down_proj, 2, True, shared)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_fused_moe_on_cpu_is_the_reference_and_handles_no_tokens() -> None:
    gen = torch.Generator().manual_seed(4)
    x, router = torch.randn(5, 16, generator=gen), torch.randn(6, 16, generator=gen)
    w_gate_up, w_down = torch.randn(6, 20, 16, generator=gen), torch.randn(6, 16, 10, generator=gen)
    assert torch.equal(fused_moe(x, router, w_gate_up, w_down, 2), fused_moe_reference(x, router, w_gate_up, w_down, 2))
    assert fused_moe(x[:0], router, w_gate_up, w_down, 2).shape == (0, 16)


@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize(("num_tokens", "num_experts", "top_k"), [(1, 128, 8), (7, 16, 4), (300, 128, 8), (64, 8, 2)])
def test_align_torch_groups_every_pair_once(num_tokens: int, num_experts: int, top_k: int, block_m: int) -> None:
    routing = skewed_routing(num_tokens, num_experts, top_k, hot=num_experts - 1, dtype=torch.float32, device="cpu")
    got = align_torch(routing.topk_ids, num_experts, block_m)
    assert got.block_m == block_m
    check_alignment(got.sorted_ids, got.expert_ids, int(got.num_padded), routing.topk_ids, num_experts, block_m)


def test_default_config_grows_the_row_block_with_rows_per_expert() -> None:
    assert default_config(1, 128, 8).block_m == 16
    assert default_config(4096, 128, 8).block_m == 64
    assert moe_config(3, 5, 7, 1, 1, "no such device") == default_config(1, 3, 1)


def test_tuned_json_round_trips_and_picks_the_nearest_larger_bucket(tmp_path: Path) -> None:
    small = MoeConfig(16, GemmConfig(32, 128, 4, 4), GemmConfig(64, 128, 4, 3))
    large = MoeConfig(64, GemmConfig(64, 64, 8, 3), GemmConfig(128, 64, 8, 3))
    path = tmp_path / "fused_moe_test.json"
    key = shape_key(8, 32, 16, 2)
    path.write_text(json.dumps({"shapes": {key: {"4": config_to_json(small), "256": config_to_json(large)}}}))
    assert moe_config(8, 32, 16, 2, 3, "x", path) == small
    assert moe_config(8, 32, 16, 2, 100, "x", path) == large
    assert moe_config(8, 32, 16, 2, 9999, "x", path) == large


def test_shipped_tuned_configs_parse_and_cover_both_models() -> None:
    files = sorted(CONFIG_DIR.glob("fused_moe_*.json"))
    if not files:
        pytest.skip("no tuned config shipped yet")
    for path in files:
        tuned = load_tuned(path)
        assert shape_key(128, 2048, 768, 8) in tuned and shape_key(128, 1024, 384, 6) in tuned
        for buckets in tuned.values():
            for cfg in buckets.values():
                assert cfg.block_m in (16, 32, 64, 128)


def test_routed_moe_on_cpu_equals_fused_moe_given_its_logits() -> None:
    from runtime.kernels.fused_moe import routed_moe

    gen = torch.Generator().manual_seed(5)
    x, router = torch.randn(5, 16, generator=gen), torch.randn(6, 16, generator=gen)
    w_gate_up, w_down = torch.randn(6, 20, 16, generator=gen), torch.randn(6, 16, 10, generator=gen)
    shared = SharedExpert(torch.randn(12, 16, generator=gen), torch.randn(16, 6, generator=gen),
                          torch.randn(1, 16, generator=gen))
    logits = torch.nn.functional.linear(x, router)
    for sh in (None, shared):
        assert torch.equal(routed_moe(x, logits, w_gate_up, w_down, 2, True, sh),
                           fused_moe(x, router, w_gate_up, w_down, 2, True, sh))
    assert routed_moe(x[:0], logits[:0], w_gate_up, w_down, 2).shape == (0, 16)


def test_small_path_fields_round_trip_and_default_for_old_entries() -> None:
    small = MoeConfig(16, GemmConfig(32, 128, 4, 4), GemmConfig(64, 128, 4, 3), 4, GemmConfig(16, 256, 4, 3),
                      GemmConfig(32, 128, 4, 5))
    assert config_from_json(json.loads(json.dumps(config_to_json(small)))) == small
    old = {k: v for k, v in config_to_json(small).items() if not k.startswith("small")}
    assert config_from_json(old) == small._replace(small_max_tokens=SMALL_PATH_MAX_TOKENS,
                                                   small_gate_up=SMALL_GATE_UP, small_down=SMALL_DOWN)
