"""GPU paths of the vision tower: each attention backend against the exact CPU fp32 path, and no host syncs."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from services.vision.model import Grid, VisionOutput, VisionTower, VisionTowerConfig
from services.vision.model.attention import varlen_available
from services.vision.preprocess import MediaFrames, MediaKind, VisionPreprocessor
from runtime.vision_processing import VisionProcessingConfig

pytestmark = pytest.mark.gpu

GRIDS_FRAMES = [(1, 4, 6), (6, 4, 4), (1, 2, 2), (5, 10, 4), (1, 16, 12)]  # (frames, grid_h, grid_w)


def backends() -> list[str]:
    return ["segments", "varlen"] if torch.cuda.is_available() and varlen_available() else ["segments"]


@contextmanager
def no_host_sync() -> Iterator[None]:
    """Any host-device synchronisation inside the block raises."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def media(seed: int = 0) -> list[MediaFrames]:
    gen = torch.Generator().manual_seed(seed)
    items = []
    for frames, h, w in GRIDS_FRAMES:
        pixels = torch.randint(0, 256, (frames, 16 * h, 16 * w, 3), dtype=torch.uint8, generator=gen)
        items.append(MediaFrames(MediaKind.IMAGE if frames == 1 else MediaKind.VIDEO, pixels))
    return items


def assert_close_bf16(got: VisionOutput, want: VisionOutput) -> None:
    for a, b in [(got.merged, want.merged), *zip(got.deepstack, want.deepstack)]:
        a, b = a.float().cpu(), b.float().cpu()
        assert torch.isfinite(a).all()
        rel = float((a - b).abs().max() / b.abs().max())
        cos = float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))
        assert rel < 5e-2 and cos > 0.999, (rel, cos)


@pytest.fixture(scope="module")
def cpu_reference(demo_ckpt: Path) -> tuple[torch.Tensor, list[Grid], VisionOutput]:
    pre = VisionPreprocessor(VisionProcessingConfig.from_checkpoint(demo_ckpt), "cpu")
    patches, grids = pre.batch(media())
    return patches, grids, VisionTower.load(demo_ckpt, "cpu", torch.float32)(patches, grids)


@pytest.mark.parametrize("attention", backends())
def test_bf16_matches_cpu_fp32(demo_ckpt: Path, cpu_reference, attention: str) -> None:
    patches, grids, want = cpu_reference
    tower = VisionTower.load(demo_ckpt, "cuda", torch.bfloat16, attention=attention)
    assert tower.attention_backend == attention
    assert_close_bf16(tower(patches.cuda(), grids), want)


def test_fp32_on_gpu_matches_cpu_tightly(demo_ckpt: Path, cpu_reference) -> None:
    patches, grids, want = cpu_reference
    got = VisionTower.load(demo_ckpt, "cuda", torch.float32, attention="segments")(patches.cuda(), grids)
    for a, b in [(got.merged, want.merged), *zip(got.deepstack, want.deepstack)]:
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))


@pytest.mark.parametrize("attention", backends())
def test_preprocess_and_forward_never_sync(demo_ckpt: Path, attention: str) -> None:
    tower = VisionTower.load(demo_ckpt, "cuda", torch.bfloat16, attention=attention)
    pre = VisionPreprocessor(VisionProcessingConfig.from_checkpoint(demo_ckpt), "cuda")
    items = media(seed=1)
    with no_host_sync():
        patches, grids = pre.batch(items)  # host frames -> device through pinned memory
        out = tower(patches, grids)  # a plan built for the first time
        again = tower(patches, grids)  # the cached plan
        parts = out.split(grids, 2)
    assert len(parts) == len(items)
    torch.testing.assert_close(out.merged, again.merged)


@pytest.mark.parametrize("attention", backends())
def test_real_widths_bf16(attention: str) -> None:
    """Real head_dim 72 and widths (3 blocks) so the kernels run the released model's shapes."""
    cfg = VisionTowerConfig(depth=3, out_hidden_size=2048, deepstack_visual_indexes=(0, 1, 2))
    gen = torch.Generator().manual_seed(0)
    with torch.device("meta"):
        shapes = {n: t.shape for n, t in VisionTower(cfg).state_dict().items()}
    shapes["patch_embed.proj.weight"] = torch.Size((cfg.hidden_size, 3, 2, 16, 16))
    state = {n: torch.randn(s, generator=gen) * 0.02 for n, s in shapes.items()}
    grids = [Grid(1, 28, 28), Grid(4, 28, 28), Grid(1, 44, 80)]
    patches = torch.randn(sum(g.num_patches for g in grids), cfg.patch_dim, generator=gen)
    want = VisionTower.from_state_dict(cfg, state, "cuda", torch.float32, "segments")(patches.cuda(), grids)
    tower = VisionTower.from_state_dict(cfg, state, "cuda", torch.bfloat16, attention)
    on_device = patches.cuda()  # a pageable host->device copy syncs by design: keep it outside the check
    with no_host_sync():
        got = tower(on_device, grids)
    assert_close_bf16(got, want)


def test_the_stage_hands_back_host_copies_of_the_towers_output(demo_ckpt: Path) -> None:
    """VisionService's batch forward on CUDA: every item's features on the host (through pinned copies and one
    wait), equal to the tower's own output split per item."""
    from runtime.config import EncoderConfig
    from runtime.metrics import Metrics
    from services.vision.encoder import VisionEncoder
    from services.vision.service import VisionService

    encoder = VisionEncoder.load(demo_ckpt, "cuda", torch.bfloat16)
    service = VisionService(encoder, Metrics("vision", "t"), EncoderConfig())
    try:
        items = media(seed=2)
        parts = service._forward(items)
        patches, grids = encoder.preprocessor.batch(items)
        want = encoder.tower(patches, grids).split(grids, 2)
        assert len(parts) == len(want) == len(items)
        for got, ref in zip(parts, want):
            assert got.merged.device.type == "cpu"
            torch.testing.assert_close(got.merged, ref.merged.cpu())
            for a, b in zip(got.deepstack, ref.deepstack):
                torch.testing.assert_close(a, b.cpu())
    finally:
        service.close()
