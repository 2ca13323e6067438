"""smart_resize equals the reference rule on many sizes and bounds."""
from __future__ import annotations

import itertools

import pytest

from gateway.media.vision import smart_resize

reference = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl").smart_resize

SIDES = [1, 7, 31, 32, 33, 48, 64, 100, 224, 448, 479, 640, 720, 1080, 1280, 1920, 3000, 4032]
BOUNDS = [(3136, 12845056), (128 * 32 * 32, 768 * 32 * 32), (32 * 32, 128 * 128)]


@pytest.mark.parametrize("lo,hi", BOUNDS)
def test_matches_reference(lo: int, hi: int) -> None:
    for h, w in itertools.product(SIDES, SIDES):
        if max(h, w) / min(h, w) > 200:
            continue
        got = smart_resize(h, w, 32, lo, hi)
        assert tuple(got) == tuple(reference(h, w, factor=32, min_pixels=lo, max_pixels=hi)), (h, w, lo, hi)
        assert got.height % 32 == 0 and got.width % 32 == 0


def test_refuses_aspect_ratio_over_200() -> None:
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(1, 201, 32, 3136, 12845056)
    with pytest.raises(ValueError):
        reference(1, 201, factor=32, min_pixels=3136, max_pixels=12845056)
