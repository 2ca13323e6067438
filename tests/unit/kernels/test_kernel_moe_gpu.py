"""GPU: the Triton MoE (top-k, grouping, grouped GEMMs, the two-launch small path, whole block) against the PyTorch
reference, in bf16."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.unit.kernels.kernel_data import (
    check_alignment, needs_cuda, rel_err, skewed_logits, skewed_routing, tie_free_rows,
)
from runtime.kernels.fused_moe import SharedExpert, fused_moe, routed_moe
from runtime.kernels.moe_config import GemmConfig, MoeConfig, default_config
from runtime.kernels.moe_reference import (
    Routing, experts_reference, route_reference, shared_expert_forward, topk_softmax_reference,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not needs_cuda(), reason="needs a CUDA device")]
BF16 = torch.bfloat16
TOL = 1.5e-2  # bf16 operands and a bf16 intermediate: expect ~3e-3


def weights(experts: int, hidden: int, inter: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    router = torch.randn(experts, hidden, device="cuda", generator=gen).to(BF16)
    w_gate_up = (torch.randn(experts, 2 * inter, hidden, device="cuda", generator=gen) / hidden**0.5).to(BF16)
    w_down = (torch.randn(experts, hidden, inter, device="cuda", generator=gen) / inter**0.5).to(BF16)
    return router, w_gate_up, w_down


def fp32_experts(x: torch.Tensor, routing: Routing, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    return experts_reference(x.float(), Routing(routing.topk_ids, routing.topk_weights.float()),
                             w_gate_up.float(), w_down.float())


@pytest.mark.parametrize(("tokens", "experts", "top_k"), [(1, 128, 8), (257, 128, 8), (64, 60, 6)])
def test_topk_softmax_matches_reference(tokens: int, experts: int, top_k: int) -> None:
    pytest.importorskip("triton")
    from runtime.kernels.moe_route_triton import topk_softmax_triton

    # distinct logits per row (a shuffled ladder 0.05 apart survives bf16), so the top-k set is unambiguous
    ladder = torch.argsort(torch.rand(tokens, experts, device="cuda"), dim=-1).float() * 0.05 - 3.0
    logits = ladder.to(BF16)
    got, ref = topk_softmax_triton(logits, top_k), topk_softmax_reference(logits, top_k)
    assert torch.equal(got.topk_ids.sort(-1).values, ref.topk_ids.sort(-1).values)
    assert rel_err(got.topk_weights.sort(-1).values, ref.topk_weights.sort(-1).values) < 1e-2
    noisy = torch.randn(tokens, experts, device="cuda").to(BF16)  # random bf16: compare rows without a tie
    got, ref = topk_softmax_triton(noisy, top_k), topk_softmax_reference(noisy, top_k)
    ok = tie_free_rows(noisy, top_k)
    assert torch.equal(got.topk_ids.sort(-1).values[ok], ref.topk_ids.sort(-1).values[ok])


@pytest.mark.parametrize("block_m", [16, 32, 64, 128])
@pytest.mark.parametrize("tokens", [1, 5, 100, 3000])
def test_triton_groupings_match_torch_on_skewed_loads(tokens: int, block_m: int) -> None:
    pytest.importorskip("triton")
    from runtime.kernels.moe_align import align_torch
    from runtime.kernels.moe_align_triton import align_triton

    routing = skewed_routing(tokens, 128, 8, hot=77, dtype=BF16, device="cuda", seed=tokens)
    ref = align_torch(routing.topk_ids, 128, block_m)
    num_padded = int(ref.num_padded)
    got = align_triton(routing.topk_ids, 128, block_m)
    assert int(got.num_padded) == num_padded
    check_alignment(got.sorted_ids, got.expert_ids, num_padded, routing.topk_ids, 128, block_m, ordered=False)
    assert torch.equal(got.expert_ids, ref.expert_ids)


CONFIGS = [
    MoeConfig(16, GemmConfig(32, 128, 4, 4), GemmConfig(64, 128, 4, 4)),
    MoeConfig(32, GemmConfig(64, 64, 4, 3), GemmConfig(64, 64, 4, 3)),
    MoeConfig(64, GemmConfig(64, 64, 4, 3), GemmConfig(128, 64, 8, 3)),
    MoeConfig(128, GemmConfig(64, 64, 8, 3), GemmConfig(128, 64, 8, 3)),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"bm{c.block_m}")
@pytest.mark.parametrize(("tokens", "hidden", "inter", "top_k"),
                         [(3, 256, 128, 8), (150, 200, 96, 6), (700, 256, 64, 8)])
def test_experts_on_ragged_loads(cfg: MoeConfig, tokens: int, hidden: int, inter: int, top_k: int) -> None:
    pytest.importorskip("triton")
    from runtime.kernels.moe_triton import experts_triton

    _, w_gate_up, w_down = weights(128, hidden, inter, seed=tokens)
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    routing = skewed_routing(tokens, 128, top_k, hot=3, dtype=BF16, device="cuda", seed=tokens)
    out = experts_triton(x, routing, w_gate_up, w_down, cfg)
    assert rel_err(out, fp32_experts(x, routing, w_gate_up, w_down)) < TOL


@pytest.mark.parametrize(("tokens", "hidden", "inter", "top_k", "with_shared"),
                         [(1, 2048, 768, 8, False), (256, 2048, 768, 8, False), (40, 1024, 384, 6, True),
                          (1000, 256, 128, 8, False)])
def test_fused_moe_matches_reference_at_real_and_small_shapes(
    tokens: int, hidden: int, inter: int, top_k: int, with_shared: bool
) -> None:
    pytest.importorskip("triton")
    router, w_gate_up, w_down = weights(128, hidden, inter, seed=hidden + tokens)
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    shared = None
    if with_shared:
        shared = SharedExpert(*(t.to(BF16) for t in (torch.randn(2 * 2 * inter, hidden, device="cuda") / hidden**0.5,
                                                       torch.randn(hidden, 2 * inter, device="cuda") / inter**0.5,
                                                       torch.randn(1, hidden, device="cuda") / hidden**0.5)))
    out = fused_moe(x, router, w_gate_up, w_down, top_k, True, shared)
    routing = route_reference(x, router, top_k)  # bf16 logits, exactly as the kernel path computes them
    ref = fp32_experts(x, routing, w_gate_up, w_down)
    if shared is not None:
        ref = ref + shared_expert_forward(x.float(), SharedExpert(*(t.float() for t in shared)))
    ok = tie_free_rows(x @ router.T, top_k)
    assert out.dtype == BF16 and out.shape == x.shape
    assert rel_err(out[ok], ref[ok]) < TOL


def ladder_logits(tokens: int, experts: int, same: bool) -> torch.Tensor:
    """Distinct logits per row (a shuffled ladder 0.05 apart survives bf16): an unambiguous top-k; `same` gives
    every row the first row's logits, so every token routes to the same k experts."""
    ladder = torch.argsort(torch.rand(tokens, experts, device="cuda"), dim=-1).float() * 0.05 - 3.0
    return (ladder[:1].expand(tokens, experts) if same else ladder).contiguous().to(BF16)


@pytest.mark.parametrize("load", ["uniform", "skewed", "same"])
@pytest.mark.parametrize("tokens", [1, 2, 4, 8, 16])
@pytest.mark.parametrize(("hidden", "inter", "top_k"), [(2048, 768, 8), (1024, 384, 6)])
def test_small_path_matches_reference_and_the_grouped_path(
    hidden: int, inter: int, top_k: int, tokens: int, load: str
) -> None:
    pytest.importorskip("triton")
    from runtime.kernels.moe_triton import routed_moe_triton

    _, w_gate_up, w_down = weights(128, hidden, inter, seed=hidden + tokens)
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    if load == "skewed":  # one expert every token uses, a few busy ones, the rest empty
        logits = skewed_logits(tokens, 128, top_k, hot=77, dtype=BF16, device="cuda", seed=tokens)
    else:
        logits = ladder_logits(tokens, 128, same=load == "same")
    cfg = default_config(tokens, 128, top_k)
    small = routed_moe_triton(x, logits, w_gate_up, w_down, top_k, True, None, cfg._replace(small_max_tokens=16))
    grouped = routed_moe_triton(x, logits, w_gate_up, w_down, top_k, True, None, cfg._replace(small_max_tokens=0))
    ref = fp32_experts(x, topk_softmax_reference(logits, top_k), w_gate_up, w_down)
    assert rel_err(small, ref) < TOL
    assert rel_err(small, grouped) < TOL


@pytest.mark.parametrize("splits", [2, 5, 48])
@pytest.mark.parametrize("tokens", [1, 4])
@pytest.mark.parametrize(("hidden", "inter", "top_k"), [(2048, 768, 8), (1024, 384, 6)])
def test_split_small_path_equals_the_unsplit_one_and_repeats_bit_for_bit(
    hidden: int, inter: int, top_k: int, tokens: int, splits: int
) -> None:
    """Splitting down's loop only regroups its fp32 sums: within rounding of the unsplit kernel, and the partials
    are added in split order, so a repeat (other programs arriving last) gives the same bits."""
    pytest.importorskip("triton")
    from runtime.kernels.moe_config import SMALL_DOWN, SMALL_GATE_UP
    from runtime.kernels.moe_small_triton import experts_small_triton

    _, w_gate_up, w_down = weights(128, hidden, inter, seed=hidden + 7 * tokens)
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    logits = ladder_logits(tokens, 128, same=False)

    def run(splits: int) -> torch.Tensor:
        return experts_small_triton(x, logits, w_gate_up, w_down, top_k, True, SMALL_GATE_UP, SMALL_DOWN, splits)

    split = run(splits)
    assert rel_err(split, run(1)) < 4e-3
    assert rel_err(split, fp32_experts(x, topk_softmax_reference(logits, top_k), w_gate_up, w_down)) < TOL
    assert all(torch.equal(split, run(splits)) for _ in range(5))


@pytest.mark.parametrize("tokens", [1, 8, 300])
def test_routed_moe_equals_fused_moe_given_its_logits(tokens: int) -> None:
    pytest.importorskip("triton")
    router, w_gate_up, w_down = weights(128, 2048, 768, seed=tokens)
    x = torch.randn(tokens, 2048, device="cuda").to(BF16)
    expected = fused_moe(x, router, w_gate_up, w_down, 8)
    assert torch.equal(routed_moe(x, F.linear(x, router), w_gate_up, w_down, 8), expected)


GROUPED = MoeConfig(16, GemmConfig(32, 128, 4, 4), GemmConfig(64, 128, 4, 3), small_max_tokens=0)


@pytest.mark.parametrize(("tokens", "config"), [(1, None), (4, None), (4, GROUPED), (300, None)],
                         ids=["small-1", "small-4", "grouped-4", "grouped-300"])
def test_fused_moe_has_no_host_sync_and_replays_in_a_cuda_graph(tokens: int, config: MoeConfig | None) -> None:
    pytest.importorskip("triton")
    router, w_gate_up, w_down = weights(128, 256, 128, seed=9)
    static_x = torch.randn(tokens, 256, device="cuda").to(BF16)
    fused_moe(static_x, router, w_gate_up, w_down, 8, config=config)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fused_moe(static_x, router, w_gate_up, w_down, 8, config=config)
    fresh = torch.randn(tokens, 256, device="cuda").to(BF16)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, fused_moe(fresh, router, w_gate_up, w_down, 8, config=config))
