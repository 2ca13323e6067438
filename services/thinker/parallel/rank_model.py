"""Which sharded LM a rank loads: Qwen3.5's hybrid LM or the Qwen3-Omni / Qwen3-ASR decoder, as load_thinker_lm
picks between their unsharded forms."""
from __future__ import annotations

from pathlib import Path

import torch

from services.thinker.parallel.collectives import RankGroup
from services.thinker.parallel.plan import ShardPlan
from services.thinker.parallel.sharded_hybrid import ShardedHybridLM
from services.thinker.parallel.sharded_lm import ShardedThinkerLM

ShardedLM = ShardedThinkerLM | ShardedHybridLM


def load_rank_model(ckpt_dir: Path | str, plan: ShardPlan, group: RankGroup, device: torch.device,
                    dtype: torch.dtype, use_kernels: bool | None = None) -> ShardedLM:
    cls = ShardedHybridLM if plan.cfg.hybrid is not None else ShardedThinkerLM
    return cls.load_shard(ckpt_dir, plan, group, device, dtype, use_kernels)
