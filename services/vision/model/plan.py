"""Host-side batch plan: everything the tower's forward needs that depends only on the grids.

Built from Python ints on the CPU, so the forward never reads a device tensor back to the host: segment
bounds, the learned-position interpolation taps, and the 2-D rotary coordinates are all known here.
Everything per patch is built once per distinct frame (`h·w` rows) and expanded over time on the device.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from runtime.transfer import to_device
from services.vision.model.grid import Grid


class SegmentRun(NamedTuple):
    """`count` consecutive attention segments of `length` patches each, starting at patch `start`."""

    start: int
    count: int
    length: int


class VisionPlan(NamedTuple):
    """Per-batch metadata; the tensors live on the host until `to(device)` moves them."""

    num_patches: int
    max_seqlen: int
    runs: tuple[SegmentRun, ...]
    cu_seqlens: torch.Tensor  # [S + 1] int32: segment bounds, one segment per temporal patch of each item
    frame_coords: torch.Tensor  # [M, 2] int64: (row, col) of each distinct-frame patch, merge-block order
    interp_index: torch.Tensor  # [M, 4] int64: taps into the flattened learned position table
    interp_weight: torch.Tensor  # [M, 4] float32: bilinear weights of those taps
    frame_row: torch.Tensor  # [N] int64: which distinct-frame row each patch repeats

    def to(self, device: torch.device) -> VisionPlan:
        """The same plan with its tensors on `device`; CUDA copies go through pinned memory, asynchronously."""
        if device.type == "cpu":
            return self
        return self._replace(
            cu_seqlens=to_device(self.cu_seqlens, device),
            frame_coords=to_device(self.frame_coords, device),
            interp_index=to_device(self.interp_index, device),
            interp_weight=to_device(self.interp_weight, device),
            frame_row=to_device(self.frame_row, device),
        )


def merge_block_coords(h: int, w: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) of every patch of one h×w frame, in (block_row, block_col, in_row, in_col) order."""
    rows = torch.arange(h).view(h // merge, 1, merge, 1).expand(h // merge, w // merge, merge, merge)
    cols = torch.arange(w).view(1, w // merge, 1, merge).expand(h // merge, w // merge, merge, merge)
    return rows.reshape(-1), cols.reshape(-1)  # [h·w] each


def axis_taps(index: torch.Tensor, size: int, side: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bilinear taps (align_corners=True) from an axis of `size` samples onto a table axis of `side` entries.

    Returns the lower tap, the upper tap (clamped to the table) and the upper tap's weight.
    """
    # float32 in the same order of operations as F.interpolate's closed form, so weights match bit for bit.
    src = index.to(torch.float32) * (side - 1) / max(size - 1, 1)
    lower = torch.floor(src)
    frac = src - lower
    lower = lower.long()
    return lower, (lower + 1).clamp(max=side - 1), frac


def interpolation_taps(
    rows: torch.Tensor, cols: torch.Tensor, h: int, w: int, side: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Four (index, weight) taps per patch that resample the side×side table to an h×w grid."""
    r0, r1, fr = axis_taps(rows, h, side)
    c0, c1, fc = axis_taps(cols, w, side)
    index = torch.stack([r0 * side + c0, r0 * side + c1, r1 * side + c0, r1 * side + c1], dim=1)  # [h·w, 4]
    weight = torch.stack([(1 - fr) * (1 - fc), (1 - fr) * fc, fr * (1 - fc), fr * fc], dim=1)  # [h·w, 4]
    return index, weight


def check_grids(grids: Sequence[Grid], merge: int) -> None:
    """Grids the merger can fold: positive sizes, rows and columns multiples of the merge size."""
    if not grids:
        raise ValueError("grids is empty; pass at least one image or video grid")
    for i, g in enumerate(grids):
        if g.t < 1 or g.h < 1 or g.w < 1 or g.h % merge or g.w % merge:
            raise ValueError(
                f"grids[{i}]={tuple(g)} is not a valid grid: t, h, w must be positive and h, w multiples of "
                f"spatial_merge_size={merge}"
            )


def build_plan(grids: Sequence[Grid], merge: int, side: int) -> VisionPlan:
    """The host-side plan for one forward over `grids`, in order."""
    check_grids(grids, merge)
    seg_lengths: list[int] = []
    runs: list[SegmentRun] = []
    coords, indices, weights, frame_rows = [], [], [], []
    start, frame_base = 0, 0
    for g in grids:
        hw = g.h * g.w
        seg_lengths.extend([hw] * g.t)
        # Consecutive items with frames of one size share a run, so one dense attention call covers them.
        if runs and runs[-1].length == hw:
            runs[-1] = runs[-1]._replace(count=runs[-1].count + g.t)
        else:
            runs.append(SegmentRun(start, g.t, hw))
        start += g.t * hw
        rows, cols = merge_block_coords(g.h, g.w, merge)
        index, weight = interpolation_taps(rows, cols, g.h, g.w, side)
        coords.append(torch.stack([rows, cols], dim=1))
        indices.append(index)
        weights.append(weight)
        frame_rows.append(torch.arange(frame_base, frame_base + hw).repeat(g.t))  # [t·h·w]
        frame_base += hw
    cu = torch.zeros(len(seg_lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(seg_lengths, dtype=torch.int64).cumsum(0).to(torch.int32)
    return VisionPlan(
        num_patches=start,
        max_seqlen=max(seg_lengths),
        runs=tuple(runs),
        cu_seqlens=cu,
        frame_coords=torch.cat(coords),
        interp_index=torch.cat(indices),
        interp_weight=torch.cat(weights),
        frame_row=torch.cat(frame_rows),
    )
