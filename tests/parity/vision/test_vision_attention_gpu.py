"""GPU: the dense SDPA backends and `auto` against the fp32 tower, and fc1's GELU epilogue against the tanh GELU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from runtime.vision_processing import VisionProcessingConfig
from services.vision.model import Grid, VisionTower, VisionTowerConfig
from services.vision.model.attention import FORCED_SDPA, varlen_available
from services.vision.model.layers import VisionMLP
from services.vision.preprocess import MediaKind, VisionPreprocessor
from tests.parity.vision.test_vision_tower_gpu import assert_close_bf16, media, no_host_sync

pytestmark = pytest.mark.gpu

CFG = VisionTowerConfig(depth=3, out_hidden_size=2048, deepstack_visual_indexes=(0, 1, 2))  # real widths, 3 blocks
VIDEO = [Grid(6, 28, 28)]  # one run of equal segments: `auto` takes the dense call
MIXED = [Grid(1, 28, 28), Grid(4, 28, 28), Grid(1, 44, 80)]  # two runs: `auto` takes varlen where it exists


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
@pytest.mark.parametrize("attention", ["auto", *FORCED_SDPA])
def test_backend_matches_fp32(state: dict[str, torch.Tensor], attention: str, grids: list[Grid]) -> None:
    patches = patches_for(grids)
    want = VisionTower.from_state_dict(CFG, state, "cuda", torch.float32, "segments")(patches, grids)
    tower = VisionTower.from_state_dict(CFG, state, "cuda", torch.bfloat16, attention)
    assert tower.attention_backend == attention
    try:
        got = tower(patches, grids)
    except RuntimeError as err:  # a forced kernel that this torch/cuDNN build does not offer for these shapes
        if not re.search("No (available kernel|viable backend)", str(err)):
            raise
        pytest.skip(f"{attention} unavailable here: {str(err).splitlines()[0]}")
    assert_close_bf16(got, want)


def test_auto_routes_by_plan(state: dict[str, torch.Tensor], monkeypatch: pytest.MonkeyPatch) -> None:
    """One-run plans go to the dense call and never to varlen; mixed plans go to varlen when it exists."""
    tower = VisionTower.from_state_dict(CFG, state, "cuda", torch.bfloat16, "auto")
    calls = []
    original = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    tower(patches_for(VIDEO), VIDEO)
    assert len(calls) == CFG.depth  # one dense call per block
    calls.clear()
    tower(patches_for(MIXED), MIXED)
    assert len(calls) == (0 if varlen_available() else 2 * CFG.depth)


@pytest.mark.parametrize("grids", [VIDEO, MIXED], ids=["video", "mixed"])
def test_auto_never_syncs(state: dict[str, torch.Tensor], grids: list[Grid]) -> None:
    tower = VisionTower.from_state_dict(CFG, state, "cuda", torch.bfloat16, "auto")
    patches = patches_for(grids)
    tower(patches, grids)  # cuDNN builds its graph on the first call of a shape
    with no_host_sync():
        tower(patches, grids)


def test_auto_on_the_demo_checkpoint(demo_ckpt: Path) -> None:
    """The service's default backend at the demo's tiny head size and segments down to 4 patches."""
    pre = VisionPreprocessor(VisionProcessingConfig.from_checkpoint(demo_ckpt), "cpu")
    image = media(seed=2)[0]  # a 4×6-patch image
    assert image.kind == MediaKind.IMAGE
    same_size = [image] * 3  # one run of three equal segments: the dense call
    want_tower = VisionTower.load(demo_ckpt, "cpu", torch.float32)
    tower = VisionTower.load(demo_ckpt, "cuda", torch.bfloat16, attention="auto")
    for items in (media(seed=2), same_size):
        patches, grids = pre.batch(items)
        assert_close_bf16(tower(patches.cuda(), grids), want_tower(patches, grids))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fc1_gelu_epilogue_matches_the_tanh_gelu(dtype: torch.dtype) -> None:
    cfg = VisionTowerConfig(hidden_size=64, intermediate_size=256, num_heads=1)
    mlp = VisionMLP(cfg).cuda().to(dtype).requires_grad_(False)
    with torch.no_grad():
        mlp.linear_fc1.weight.normal_(0, 0.25)  # pre-activations of spread ~2: GELU's curved part and both tails
    x = torch.randn(300, cfg.hidden_size, device="cuda").to(dtype)
    fc1 = mlp.linear_fc1
    hidden = torch._addmm_activation(fc1.bias, x, fc1.weight.t(), use_gelu=True)
    assert torch.equal(mlp(x), mlp.linear_fc2(hidden))  # VisionMLP takes the epilogue path here
    want = F.gelu(F.linear(x.float(), fc1.weight.float(), fc1.bias.float()), approximate="tanh")
    assert float((hidden.float() - want).abs().max() / want.abs().max()) < 1e-2
