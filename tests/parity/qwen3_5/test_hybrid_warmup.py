"""The hybrid warm-up steps (services/thinker/hybrid_warmup.py) run every shape through the model and touch only
the scratch state slot and the scratch KV block: live requests' states and KV are left exactly as they were."""
from __future__ import annotations

import torch

from runtime.attention import allocate_kv_cache
from services.thinker.hybrid_warmup import WARMUP_STEPS, warm_hybrid_steps, warmup_steps
from services.thinker.model.hybrid_lm import HybridLM


def test_warmup_touches_only_the_scratch_slot_and_block(hybrid_lm: HybridLM) -> None:
    cfg, block_size, num_blocks, num_slots = hybrid_lm.cfg, 16, 5, 3
    gen = torch.Generator().manual_seed(0)
    kv = allocate_kv_cache(len(cfg.kv_layers), num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim,
                           torch.float32, torch.device("cpu"))
    for layer in kv:
        layer.copy_(torch.randn(layer.shape, generator=gen))
    states = hybrid_lm.allocate_states(num_slots, torch.device("cpu"))
    states.conv.copy_(torch.randn(states.conv.shape, generator=gen))
    states.recurrent.copy_(torch.randn(states.recurrent.shape, generator=gen))
    kv_before = [layer.clone() for layer in kv]
    conv_before, recurrent_before = states.conv.clone(), states.recurrent.clone()
    scratch_slot, scratch_block = num_slots - 1, num_blocks - 1

    seconds = warm_hybrid_steps(hybrid_lm, states, kv, block_size, scratch_slot, scratch_block, torch.device("cpu"))

    assert seconds > 0 and max(max(step) for step in WARMUP_STEPS) > block_size  # a row spans several table entries
    live_slots, live_blocks = slice(0, scratch_slot), slice(0, scratch_block)
    assert torch.equal(states.conv[:, live_slots], conv_before[:, live_slots])
    assert torch.equal(states.recurrent[:, live_slots], recurrent_before[:, live_slots])
    for layer, before in zip(kv, kv_before):
        assert torch.equal(layer[:, live_blocks], before[:, live_blocks])
    # the steps did run: the scratch slot and block hold what they wrote
    assert not torch.equal(states.recurrent[:, scratch_slot], recurrent_before[:, scratch_slot])
    assert any(not torch.equal(layer[:, scratch_block], before[:, scratch_block]) for layer, before in zip(kv, kv_before))


def test_a_larger_engine_step_is_warmed_too() -> None:
    assert warmup_steps(8192) == WARMUP_STEPS + ((8192,),)
    assert warmup_steps(4096) == warmup_steps(0) == WARMUP_STEPS  # no step larger than what the warm-up runs
