"""The thinker stage's one entry point to its language model: the checkpoint's config picks Qwen3-Omni / Qwen3-ASR's
ThinkerLM or Qwen3.5's HybridLM."""
from __future__ import annotations

from pathlib import Path

import torch

from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.lm import ThinkerLM


def load_thinker_lm(ckpt_dir: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                    use_kernels: bool | None = None) -> ThinkerLM | HybridLM:
    """Raises ValueError naming the config field when the checkpoint is one the engine cannot serve."""
    if ThinkerConfig.from_checkpoint(ckpt_dir).hybrid is not None:
        return HybridLM.load(ckpt_dir, device=device, dtype=dtype, use_kernels=use_kernels)
    return ThinkerLM.load(ckpt_dir, device=device, dtype=dtype, use_kernels=use_kernels)
