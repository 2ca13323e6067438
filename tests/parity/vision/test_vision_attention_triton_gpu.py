"""GPU: the Triton vision attention kernel against per-segment SDPA at the released model's heads (16 of 72), and the
tower with `attention="triton"` against the fp32 tower and the default backend, with no host sync."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runtime.kernels.vision_attention import vision_attention, vision_attention_reference
from services.vision.model import Grid, VisionTower, VisionTowerConfig
from services.vision.model.attention import segment_sdpa
from services.vision.model.plan import VisionPlan, build_plan
from services.vision.preprocess import VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig
from tests.parity.vision.test_vision_tower_gpu import assert_close_bf16, media, no_host_sync
from tests.unit.kernels.kernel_data import rel_err

pytestmark = pytest.mark.gpu

CFG = VisionTowerConfig(depth=3, out_hidden_size=2048, deepstack_visual_indexes=(0, 1, 2))  # real widths, 3 blocks
IMAGES = [Grid(1, 28, 28)] * 4  # four segments of 784: one run
MIXED = [Grid(2, 28, 28), Grid(1, 44, 80), Grid(1, 2, 6), Grid(1, 10, 10)]  # 784 x 2, 3,520, 12 and 100
VIDEO = [Grid(6, 28, 28)]


def plan_for(grids: list[Grid]) -> VisionPlan:
    return build_plan(grids, CFG.spatial_merge_size, CFG.position_grid_side).to(torch.device("cuda"))


def packed_qkv(num_tokens: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """[N, 3, H, D] as the qkv GEMM writes it; a spread of 2 gives peaked softmax rows, not near-uniform ones."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qkv = 2 * torch.randn(num_tokens, 3 * CFG.hidden_size, device="cuda", generator=gen)
    return qkv.to(dtype).unflatten(-1, (3, CFG.num_heads, CFG.head_dim))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("grids", [IMAGES, MIXED], ids=["images", "mixed"])
def test_kernel_matches_sdpa_at_real_heads(grids: list[Grid], dtype: torch.dtype) -> None:
    plan = plan_for(grids)
    qkv = packed_qkv(plan.num_patches, dtype)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    want = vision_attention_reference(q, k, v, plan.cu_seqlens)  # float32 SDPA per segment
    sdpa_err = rel_err(segment_sdpa(q, k, v, plan), want)  # torch's own half-precision kernel, for scale
    for q_in, k_in in ((q, k), (q.contiguous(), k.contiguous())):  # all views, and q, k as the rotary writes them
        got = vision_attention(q_in, k_in, v, plan.cu_seqlens, plan.max_seqlen)
        assert got.is_contiguous() and got.dtype == dtype and torch.isfinite(got).all()
        err = rel_err(got, want)
        assert err < 1e-2 and err < 2 * sdpa_err + 1e-3, (err, sdpa_err)


def test_every_swept_tile_matches_sdpa() -> None:
    from runtime.kernels.vision_attention_triton import SWEEP_TILES

    plan = plan_for(MIXED)
    qkv = packed_qkv(plan.num_patches, torch.bfloat16, seed=1)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    want = vision_attention_reference(q, k, v, plan.cu_seqlens)
    for tile in SWEEP_TILES:
        assert rel_err(vision_attention(q, k, v, plan.cu_seqlens, plan.max_seqlen, tile), want) < 1e-2, tile


def test_kernel_replays_in_a_cuda_graph() -> None:
    plan = plan_for(MIXED)
    qkv = packed_qkv(plan.num_patches, torch.bfloat16, seed=2)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    want = vision_attention(q, k, v, plan.cu_seqlens, plan.max_seqlen)  # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = vision_attention(q, k, v, plan.cu_seqlens, plan.max_seqlen)
    qkv.copy_(packed_qkv(plan.num_patches, torch.bfloat16, seed=3))
    graph.replay()
    torch.testing.assert_close(out, vision_attention(q, k, v, plan.cu_seqlens, plan.max_seqlen), rtol=0, atol=0)
    assert not torch.equal(out, want)


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    with torch.device("meta"):
        shapes = {n: t.shape for n, t in VisionTower(CFG).state_dict().items()}
    shapes["patch_embed.proj.weight"] = torch.Size((CFG.hidden_size, 3, 2, 16, 16))
    return {n: torch.randn(s, generator=gen) * 0.02 for n, s in shapes.items()}


def patches_for(grids: list[Grid]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(sum(g.num_patches for g in grids), CFG.patch_dim, generator=gen).cuda()


@pytest.mark.parametrize("grids", [VIDEO, MIXED], ids=["video", "mixed"])
def test_tower_matches_fp32_and_the_default_backend(state: dict[str, torch.Tensor], grids: list[Grid]) -> None:
    patches = patches_for(grids)
    want = VisionTower.from_state_dict(CFG, state, "cuda", torch.float32, "segments")(patches, grids)
    default = VisionTower.from_state_dict(CFG, state, "cuda", torch.bfloat16)(patches, grids)
    tower = VisionTower.from_state_dict(CFG, state, "cuda", torch.bfloat16, "triton")
    assert tower.attention_backend == "triton"
    got = tower(patches, grids)
    assert_close_bf16(got, want)
    assert_close_bf16(got, default)


@pytest.mark.parametrize("grids", [VIDEO, MIXED], ids=["video", "mixed"])
def test_tower_never_syncs(state: dict[str, torch.Tensor], grids: list[Grid]) -> None:
    tower = VisionTower.from_state_dict(CFG, state, "cuda", torch.bfloat16, "triton")
    patches = patches_for(grids)
    tower(patches, grids)  # Triton compiles the kernel on the first call of a shape
    with no_host_sync():
        tower(patches, grids)


def test_tower_on_the_demo_checkpoint(demo_ckpt: Path) -> None:
    """Head dim 16 (one tile, no tail) and segments down to 4 patches, against the CPU fp32 tower."""
    pre = VisionPreprocessor(VisionProcessingConfig.from_checkpoint(demo_ckpt), "cpu")
    patches, grids = pre.batch(media())
    want = VisionTower.load(demo_ckpt, "cpu", torch.float32)(patches, grids)
    tower = VisionTower.load(demo_ckpt, "cuda", torch.bfloat16, attention="triton")
    assert_close_bf16(tower(patches.cuda(), grids), want)
