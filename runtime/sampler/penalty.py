"""The repetition penalty (transformers' RepetitionPenaltyLogitsProcessor) over a mask of ids already seen."""
from __future__ import annotations

import torch


def penalize(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor | float) -> torch.Tensor:
    """Positive scores of seen ids / penalty, negative ones * penalty; `seen` `(B, V)` bool, `penalty` `(B,)` or
    one value for every row."""
    p = penalty[:, None] if isinstance(penalty, torch.Tensor) else penalty
    return torch.where(seen, torch.where(logits < 0, logits * p, logits / p), logits)
