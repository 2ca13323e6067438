"""The host-side batch plan: segments, runs, merge-block coordinates and position interpolation taps."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from services.vision.model.grid import Grid
from services.vision.model.plan import SegmentRun, build_plan, merge_block_coords

GRIDS = [Grid(1, 4, 6), Grid(3, 2, 2), Grid(1, 2, 2), Grid(2, 6, 4)]


def test_segments_and_runs() -> None:
    plan = build_plan(GRIDS, merge=2, side=8)
    lengths = [24, 4, 4, 4, 4, 24, 24]
    assert plan.cu_seqlens.dtype == torch.int32
    assert plan.cu_seqlens.tolist() == [0, 24, 28, 32, 36, 40, 64, 88]
    assert plan.num_patches == sum(lengths) and plan.max_seqlen == 24
    # consecutive equal-length segments share a run, across items too
    assert plan.runs == (SegmentRun(0, 1, 24), SegmentRun(24, 4, 4), SegmentRun(40, 2, 24))


def test_merge_block_order() -> None:
    rows, cols = merge_block_coords(4, 4, 2)
    pairs = list(zip(rows.tolist(), cols.tolist()))
    assert pairs[:8] == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    assert pairs[8:12] == [(2, 0), (2, 1), (3, 0), (3, 1)]


def test_frames_repeat_over_time() -> None:
    plan = build_plan([Grid(1, 2, 2), Grid(3, 2, 4)], merge=2, side=8)
    assert plan.frame_coords.shape == (4 + 8, 2)
    assert plan.frame_row.tolist() == [0, 1, 2, 3] + list(range(4, 12)) * 3


@pytest.mark.parametrize("h,w", [(2, 2), (4, 6), (10, 4), (16, 16), (20, 2)])
def test_interpolation_equals_bilinear_align_corners(h: int, w: int) -> None:
    side, channels = 8, 5
    table = torch.randn(side * side, channels, dtype=torch.float64)
    plan = build_plan([Grid(1, h, w)], merge=2, side=side)
    ours = (table[plan.interp_index] * plan.interp_weight[:, :, None].double()).sum(1)  # [h·w, C], merge order
    grid = table.T.reshape(1, channels, side, side)
    ref = F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=True)[0]  # [C, h, w]
    rows, cols = merge_block_coords(h, w, 2)
    torch.testing.assert_close(ours, ref[:, rows, cols].T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("grids", [[], [Grid(0, 2, 2)], [Grid(1, 3, 2)], [Grid(1, 2, 0)]])
def test_bad_grids(grids: list[Grid]) -> None:
    with pytest.raises(ValueError, match="grid"):
        build_plan(grids, merge=2, side=8)
