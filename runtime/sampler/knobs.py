"""Per-row sampling settings as one float32 table, as the pick kernel and its reference read them: built once per
batch (or per talker frame, whose 16 picks share them), on the device, without a host sync."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.transfer import to_device

# A pick considers each row's WIDTH best scores: rows whose top_k is in 1..WIDTH (the thinker's default 20, the
# talker's 50) are drawn exactly from them, so the vocabulary is never sorted. A power of two: the kernel's bitonic
# top-k.
WIDTH = 64

# Columns of RowKnobs.table
SAMPLE = 0  # 1.0: the row draws; 0.0: it takes the argmax
TEMPERATURE = 1
KTH = 2  # rank of the k-th best score among the width best: clamp(top_k, 1, width) - 1
MASS_FLOOR = 3  # 1 - top_p, or -1 where top_p is 1 (no cumulative mass is <= -1: top-p is off)
MIN_P = 4
NUM_COLUMNS = 5


def mass_floor(top_p: torch.Tensor) -> torch.Tensor:
    """What a token's ascending mass is compared with, float32: 1 - top_p computed in float64 and rounded once, as
    TopPLogitsWarper's comparison with a Python float rounds it (so float64 settings from Python floats give its
    floor exactly; float32 ones, as a wire request's are, that of their rounded top_p); -1 where top-p is off:
    float cumsums reach 1 before the tail, so top_p 1 must not reach the comparison."""
    top_p = top_p.double()
    return torch.where(top_p < 1, 1 - top_p, -1.0).float()


@dataclass(frozen=True)
class RowKnobs:
    table: torch.Tensor  # (B, NUM_COLUMNS) float32, contiguous
    width: int

    @classmethod
    def build(cls, sample: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
              min_p: torch.Tensor | None = None, width: int = WIDTH) -> RowKnobs:  # fmt: skip
        """From `(B,)` columns on one device; every drawing row's top_k must be in 1..width (others need
        `rules.filter_logits` over the vocabulary). Float columns are fine for top_k (a talker frame's knobs)."""
        if width < 1 or width & (width - 1):
            raise ValueError(f"RowKnobs width={width}: must be a power of two (the kernel's bitonic top-k)")
        kth = top_k.long().clamp(1, width) - 1
        floor = mass_floor(top_p)
        min_p = torch.zeros_like(floor) if min_p is None else min_p.float()
        table = torch.stack((sample.float(), temperature.float(), kth.float(), floor, min_p), dim=1)
        return cls(table.contiguous(), width)

    @classmethod
    def from_settings(cls, rows: list[tuple[bool, float, int, float, float]], device: torch.device,
                      width: int = WIDTH) -> RowKnobs:  # fmt: skip
        """`build` from each row's (sample, temperature, top_k, top_p, min_p) on the host, in one upload and no
        device launches (the thinker's settings arrive as Python values every step); 1 - top_p in Python's float64,
        rounded once, as `mass_floor`."""
        table = [[float(sample), temperature, min(max(top_k, 1), width) - 1, 1.0 - top_p if top_p < 1 else -1.0, min_p]
                 for sample, temperature, top_k, top_p, min_p in rows]
        return cls(to_device(torch.tensor(table, dtype=torch.float32).reshape(-1, NUM_COLUMNS), device), width)

    @property
    def sample(self) -> torch.Tensor:
        return self.table[:, SAMPLE] > 0
