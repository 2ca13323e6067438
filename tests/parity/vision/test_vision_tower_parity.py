"""Our vision tower equals transformers' `thinker.visual` on the demo checkpoint (fp32, CPU)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from services.vision.model import Grid, VisionOutput, VisionTower
from services.vision.preprocess import MediaFrames, MediaKind, VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig

# Images of several sizes and aspect ratios (patch units): the smallest, wider and taller than the 8×8 position
# table, exactly the table, and a long strip.
IMAGE_GRIDS = [Grid(1, 2, 2), Grid(1, 4, 6), Grid(1, 10, 4), Grid(1, 8, 8), Grid(1, 16, 12), Grid(1, 2, 20)]


@pytest.fixture(scope="module")
def tower(demo_ckpt: Path) -> VisionTower:
    return VisionTower.load(demo_ckpt, "cpu", torch.float32)


@pytest.fixture(scope="module")
def preprocessor(demo_ckpt: Path) -> VisionPreprocessor:
    return VisionPreprocessor(VisionProcessingConfig.from_checkpoint(demo_ckpt), "cpu")


def random_frames(num_frames: int, grid_h: int, grid_w: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (num_frames, 16 * grid_h, 16 * grid_w, 3), dtype=torch.uint8, generator=gen)


def hf_visual(hf_omni: Any) -> Any:
    """The reference vision encoder (`thinker.model.visual` in transformers 5.x, `thinker.visual` in 4.57)."""
    thinker = hf_omni.thinker
    return thinker.model.visual if hasattr(thinker, "model") and hasattr(thinker.model, "visual") else thinker.visual


def reference(hf_omni: Any, patches: torch.Tensor, grids: list[Grid]) -> VisionOutput:
    grid_thw = torch.tensor([list(g) for g in grids], dtype=torch.int64)
    with torch.no_grad():
        out = hf_visual(hf_omni)(patches, grid_thw=grid_thw)
    return VisionOutput(out.pooler_output, list(out.deepstack_features))


def assert_same(ours: VisionOutput, ref: VisionOutput) -> None:
    assert len(ours.deepstack) == len(ref.deepstack) > 0
    for got, want in [(ours.merged, ref.merged), *zip(ours.deepstack, ref.deepstack)]:
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def test_loads_exactly_the_visual_weights(tower: VisionTower, hf_omni: Any) -> None:
    ours = set(tower.state_dict())
    theirs = set(hf_visual(hf_omni).state_dict())
    assert ours == theirs


@pytest.mark.parametrize("grid", IMAGE_GRIDS, ids=lambda g: f"{g.h}x{g.w}")
def test_image(tower: VisionTower, preprocessor: VisionPreprocessor, hf_omni: Any, grid: Grid) -> None:
    patches, got_grid = preprocessor.image(random_frames(1, grid.h, grid.w, seed=grid.h * 100 + grid.w))
    assert got_grid == grid
    assert_same(tower(patches, [grid]), reference(hf_omni, patches, [grid]))


@pytest.mark.parametrize("num_frames", [6, 5], ids=["even", "odd"])
def test_video(tower: VisionTower, preprocessor: VisionPreprocessor, hf_omni: Any, num_frames: int) -> None:
    patches, grid = preprocessor.video(random_frames(num_frames, 4, 6, seed=num_frames))
    assert grid == Grid(3, 4, 6)
    assert_same(tower(patches, [grid]), reference(hf_omni, patches, [grid]))


def test_mixed_batch_in_one_forward(tower: VisionTower, preprocessor: VisionPreprocessor, hf_omni: Any) -> None:
    items = [
        MediaFrames(MediaKind.IMAGE, random_frames(1, 4, 6, seed=1)),
        MediaFrames(MediaKind.VIDEO, random_frames(4, 2, 2, seed=2)),
        MediaFrames(MediaKind.IMAGE, random_frames(1, 2, 2, seed=3)),
        MediaFrames(MediaKind.IMAGE, random_frames(1, 10, 4, seed=4)),
        MediaFrames(MediaKind.VIDEO, random_frames(3, 4, 4, seed=5)),
    ]
    patches, grids = preprocessor.batch(items)
    batched = tower(patches, grids)
    assert_same(batched, reference(hf_omni, patches, grids))
    # and each item's slice equals the reference run on that item alone
    rows = torch.split(patches, [g.num_patches for g in grids])
    for part, item_rows, grid in zip(batched.split(grids, 2), rows, grids):
        assert_same(part, reference(hf_omni, item_rows, [grid]))


def test_encoder_facade(demo_ckpt: Path, hf_omni: Any) -> None:
    """VisionEncoder.load + encode: preprocess and one forward, per-item outputs equal the reference."""
    from services.vision.encoder import VisionEncoder

    encoder = VisionEncoder.load(demo_ckpt, "cpu", torch.float32)
    items = [MediaFrames(MediaKind.IMAGE, random_frames(1, 4, 6, seed=7)[0]),
             MediaFrames(MediaKind.VIDEO, random_frames(3, 2, 4, seed=8))]
    grids = [encoder.grid_of(item) for item in items]
    assert grids == [Grid(1, 4, 6), Grid(2, 2, 4)]
    outputs = encoder.encode(items)
    patches, got_grids = encoder.preprocessor.batch(items)
    assert got_grids == grids
    rows = torch.split(patches, [g.num_patches for g in grids])
    for out, item_rows, grid in zip(outputs, rows, grids):
        assert out.merged.shape[0] == grid.num_tokens(2)
        assert_same(out, reference(hf_omni, item_rows, [grid]))
