"""VisionTower alone (random weights): one GEMM == Conv3d, items never attend to each other, input checks."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from services.vision.model import Grid, VisionTower, VisionTowerConfig
from services.vision.model.attention import select_attention

CFG = VisionTowerConfig(
    depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
    num_position_embeddings=64, deepstack_visual_indexes=(0, 2),
)


def random_state(cfg: VisionTowerConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Checkpoint-shaped tensors (Conv3d kernel included) with a spread large enough to make mixing visible."""
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        shapes = {name: t.shape for name, t in VisionTower(cfg).state_dict().items()}
    shapes["patch_embed.proj.weight"] = torch.Size(
        (cfg.hidden_size, cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
    )
    return {name: torch.randn(shape, generator=gen) * 0.2 for name, shape in shapes.items()}


@pytest.fixture(scope="module")
def tower() -> VisionTower:
    return VisionTower.from_state_dict(CFG, random_state(CFG), "cpu", torch.float32)


def test_patch_embed_gemm_equals_conv3d(tower: VisionTower) -> None:
    state = random_state(CFG)
    patches = torch.randn(12, CFG.patch_dim)
    conv = F.conv3d(patches.view(-1, 3, 2, 16, 16), state["patch_embed.proj.weight"], state["patch_embed.proj.bias"],
                    stride=(2, 16, 16))
    # values are ~8 in size and sum 1536 products: fp32 summation order alone moves them by ~1e-5
    torch.testing.assert_close(tower.patch_embed(patches), conv.view(12, -1), rtol=1e-5, atol=1e-4)


def test_batch_equals_items_one_by_one(tower: VisionTower) -> None:
    grids = [Grid(1, 4, 6), Grid(2, 2, 2), Grid(1, 2, 2), Grid(1, 6, 2)]
    patches = torch.randn(sum(g.num_patches for g in grids), CFG.patch_dim)
    batched = tower(patches, grids).split(grids, CFG.spatial_merge_size)
    for item, (rows, grid) in enumerate(zip(torch.split(patches, [g.num_patches for g in grids]), grids)):
        alone = tower(rows, [grid])
        torch.testing.assert_close(batched[item].merged, alone.merged, rtol=1e-5, atol=1e-5)
        for got, want in zip(batched[item].deepstack, alone.deepstack):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_frames_of_a_video_do_not_attend_to_each_other(tower: VisionTower) -> None:
    # Changing the second temporal patch must leave the first one's outputs untouched.
    patches = torch.randn(2 * 16, CFG.patch_dim)
    changed = patches.clone()
    changed[16:] += 1.0
    a, b = tower(patches, [Grid(2, 4, 4)]), tower(changed, [Grid(2, 4, 4)])
    torch.testing.assert_close(a.merged[:4], b.merged[:4], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(a.merged[4:], b.merged[4:])


def test_output_shapes_and_split(tower: VisionTower) -> None:
    grids = [Grid(1, 4, 6), Grid(3, 2, 2)]
    out = tower(torch.randn(36, CFG.patch_dim), grids)
    assert out.merged.shape == (9, 48) and len(out.deepstack) == 2
    assert all(d.shape == (9, 48) for d in out.deepstack)
    parts = out.split(grids, 2)
    assert [p.merged.shape[0] for p in parts] == [6, 3]


def test_plans_are_cached(tower: VisionTower) -> None:
    grids = [Grid(1, 2, 2)]
    assert tower.plan(grids) is tower.plan([Grid(1, 2, 2)])


def test_patch_count_must_match_grids(tower: VisionTower) -> None:
    with pytest.raises(ValueError, match="grids need"):
        tower(torch.randn(10, CFG.patch_dim), [Grid(1, 2, 2)])


def test_attention_backend_choice() -> None:
    assert select_attention("auto", torch.device("cpu"), torch.float32)[0] == "segments"
    with pytest.raises(ValueError, match="needs CUDA"):
        select_attention("varlen", torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="not a backend"):
        select_attention("flash3", torch.device("cpu"), torch.float32)


def test_varlen_plumbing_with_a_stand_in_kernel(tower: VisionTower, monkeypatch: pytest.MonkeyPatch) -> None:
    """The varlen backend hands the kernel packed [N, H, D] tensors, int32 cu_seqlens and the host max length."""
    from services.vision.model import attention

    calls = []

    def stand_in(q, k, v, cu_q, cu_k, max_q, max_k):  # noqa: ANN001, ANN202 - mimics varlen_attn's signature
        calls.append((cu_q.dtype, max_q, max_k))
        bounds = cu_q.tolist()
        outs = [
            F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1) for t in (q, k, v))).transpose(0, 1)
            for a, b in zip(bounds, bounds[1:])
        ]
        return torch.cat(outs)

    monkeypatch.setattr(attention, "_flash_attn_varlen", lambda: None)
    monkeypatch.setattr(attention, "_torch_varlen", lambda: stand_in)
    grids = [Grid(1, 4, 6), Grid(3, 2, 2), Grid(1, 6, 2)]
    patches = torch.randn(sum(g.num_patches for g in grids), CFG.patch_dim)
    want = tower(patches, grids)
    monkeypatch.setattr(tower, "_attend", attention.make_varlen())
    got = tower(patches, grids)
    assert calls and calls[0] == (torch.int32, 24, 24)
    torch.testing.assert_close(got.merged, want.merged, rtol=1e-5, atol=1e-5)
