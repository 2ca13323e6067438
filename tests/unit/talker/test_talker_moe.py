"""The Talker MoE: the grouped-GEMM path equals the per-expert loop; routing renormalises the chosen weights."""
from __future__ import annotations

import torch

from services.talker.model.moe import TalkerMoE


def moe() -> TalkerMoE:
    torch.manual_seed(0)
    block = TalkerMoE(dim=32, num_experts=8, top_k=3, intermediate=16, shared_intermediate=24, norm_topk_prob=True)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return block


def test_grouped_mm_equals_loop() -> None:
    block, x = moe(), torch.randn(2, 5, 32)
    with torch.no_grad():
        loop = block(x)
        for module in block.modules():
            if hasattr(module, "use_grouped_mm"):
                module.use_grouped_mm = True
        grouped = block(x)
    assert torch.allclose(loop, grouped, atol=1e-5)


def test_router_weights_sum_to_one() -> None:
    weights, ids = moe().gate(torch.randn(7, 32))
    assert ids.shape == (7, 3) and torch.allclose(weights.sum(-1), torch.ones(7))
