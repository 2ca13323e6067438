"""Our vision tower serves Qwen3.5's ViT (no deepstack, Qwen3-VL merger names): equal to transformers' `model.visual`
on the Qwen3.5 demo checkpoints (fp32, CPU), images, videos and a mixed batch in one forward."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from runtime.vision_processing import VisionProcessingConfig
from services.vision.model import Grid, VisionTower, VisionTowerConfig
from services.vision.preprocess import MediaFrames, MediaKind, VisionPreprocessor


def random_frames(num_frames: int, grid_h: int, grid_w: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (num_frames, 16 * grid_h, 16 * grid_w, 3), dtype=torch.uint8, generator=gen)


@pytest.fixture(scope="module", params=[False, True], ids=["dense", "moe"])
def ckpt(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue("qwen3_5_moe_ckpt" if request.param else "qwen3_5_ckpt")


@pytest.fixture(scope="module")
def hf_visual(ckpt: Path) -> Any:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="sdpa")
    return model.model.visual.eval()


@pytest.fixture(scope="module")
def tower(ckpt: Path) -> VisionTower:
    return VisionTower.load(ckpt, "cpu", torch.float32)


def reference(hf_visual: Any, patches: torch.Tensor, grids: list[Grid]) -> torch.Tensor:
    with torch.no_grad():
        return hf_visual(patches, grid_thw=torch.tensor([list(g) for g in grids])).pooler_output


def test_config_has_no_deepstack_and_loads_every_visual_weight(ckpt: Path, tower: VisionTower,
                                                               hf_visual: Any) -> None:
    raw = json.loads((ckpt / "config.json").read_text())["vision_config"]
    assert VisionTowerConfig.from_checkpoint(ckpt).deepstack_visual_indexes == ()
    # the section alone would take Omni's default deepstack layers (8, 16, 24): the family, not the section, decides
    with pytest.raises(ValueError, match="deepstack_visual_indexes=\\[8, 16, 24\\]"):
        VisionTowerConfig.from_dict(raw)
    assert len(tower.merger_list) == 0
    assert sum(t.numel() for t in tower.state_dict().values()) == sum(p.numel() for p in hf_visual.parameters())


def test_images_video_and_mixed_batch(ckpt: Path, tower: VisionTower, hf_visual: Any) -> None:
    pre = VisionPreprocessor(VisionProcessingConfig.from_checkpoint(ckpt), "cpu")
    items = [MediaFrames(MediaKind.IMAGE, random_frames(1, 4, 6, seed=1)),
             MediaFrames(MediaKind.VIDEO, random_frames(5, 2, 4, seed=2)),  # odd: the last frame repeats
             MediaFrames(MediaKind.IMAGE, random_frames(1, 10, 4, seed=3))]
    patches, grids = pre.batch(items)
    assert grids == [Grid(1, 4, 6), Grid(3, 2, 4), Grid(1, 10, 4)]
    out = tower(patches, grids)
    assert out.deepstack == []
    want = reference(hf_visual, patches, grids)
    assert out.merged.shape == want.shape == (6 + 6 + 10, 64)
    torch.testing.assert_close(out.merged, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    alone = tower(*pre.batch(items[1:2]))  # an item's rows do not depend on its batch neighbours
    torch.testing.assert_close(alone.merged, out.merged[6:12], rtol=1e-5, atol=1e-6)


def test_a_model_without_a_tower_is_refused(asr_ckpt: Path) -> None:
    with pytest.raises(ValueError, match="no vision_config: a qwen3-asr checkpoint without a vision tower.*needs "
                                         "audio, thinker"):
        VisionTowerConfig.from_checkpoint(asr_ckpt)


@pytest.mark.gpu
def test_bf16_on_gpu_matches_cpu_fp32_without_host_syncs(ckpt: Path, tower: VisionTower) -> None:
    from tests.parity.vision.test_vision_tower_gpu import assert_close_bf16, backends, media, no_host_sync

    pre = VisionPreprocessor(VisionProcessingConfig.from_checkpoint(ckpt), "cpu")
    patches, grids = pre.batch(media())
    want = tower(patches, grids)
    for attention in backends():
        gpu = VisionTower.load(ckpt, "cuda", torch.bfloat16, attention=attention)
        on_device = patches.cuda()
        gpu(on_device, grids)  # the plan is built (and cached) on the first forward
        with no_host_sync():
            got = gpu(on_device, grids)
        assert got.deepstack == []
        assert_close_bf16(got, want)
