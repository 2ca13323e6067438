"""Teacher-forced stepping of a ThinkerLM over a paged cache in its own dtype: one packed prefill, then decode steps
that feed given tokens, so two models (devices, dtypes, paths) see the same inputs and their logits compare."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.attention import allocate_kv_cache, build_attention_context
from services.thinker.model import ThinkerLM


@dataclass
class ForcedRun:
    logits: list[torch.Tensor]  # per step (prefill's last rows, then each decode step): [num_prompts, V] fp32 on CPU
    greedy: list[list[int]]  # per step, each prompt's argmax


def forced_steps(model: ThinkerLM, prompts: list[list[int]], feed: list[list[int]] | None, steps: int,
                 block_size: int = 4) -> ForcedRun:
    """feed[s][i]: the token prompt i is given at decode step s (None: its own argmax, i.e. greedy)."""
    cfg = model.cfg
    device = model.lm_head.weight.device
    dtype = model.lm_head.weight.dtype
    longest = max(len(p) for p in prompts) + steps + 1
    per_seq = -(-longest // block_size)
    kv = allocate_kv_cache(cfg.num_layers, per_seq * len(prompts) + 1, block_size, cfg.num_kv_heads, cfg.head_dim,
                           dtype, device)
    # interleaved block ids, so no sequence's blocks are contiguous
    tables = [[i + j * len(prompts) for j in range(per_seq)] for i in range(len(prompts))]
    lens = [len(p) for p in prompts]
    ids = torch.tensor([t for p in prompts for t in p], device=device)
    positions = torch.cat([torch.arange(n) for n in lens]).expand(3, -1).to(device)
    run = ForcedRun([], [])
    q_lens = lens
    for step in range(steps + 1):
        ctx = build_attention_context(q_lens, lens, tables, block_size, device)
        with torch.inference_mode():
            out = model(model.embed(ids), positions, ctx, kv)
            last = torch.cumsum(torch.tensor(q_lens), 0) - 1
            logits = model.compute_logits(out.hidden[last.to(device)]).float().cpu()
        run.logits.append(logits)
        run.greedy.append(logits.argmax(-1).tolist())
        nxt = feed[step] if feed is not None and step < len(feed) else run.greedy[-1]
        ids = torch.tensor(nxt, device=device)
        positions = torch.tensor(lens, device=device).expand(3, -1)
        lens = [n + 1 for n in lens]
        q_lens = [1] * len(prompts)
    return run


def top2_gap(logits: torch.Tensor) -> torch.Tensor:
    """[N, V] -> [N]: how far the best logit is ahead of the second."""
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())
