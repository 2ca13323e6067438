"""The experts the measured run's routers picked: each sequence the run served (prompt and generated tokens) fed back
whole through the same ThinkerLM with a RouterTap, so every decode step's rows can be looked up by position.

A token's router input depends only on the tokens before it (causal attention), so the replay routes each position
as the run did; only bf16 rounding differs between a prefill and a decode step, which moves a near-tie now and then
and no count. The measured run itself stays untouched: graphs, kernels and engine are the served ones."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bench.moe_routing import ROW_COUNTS, Calibration, RouterTap, moe_layers, step_experts_touched
from bench.thinker.engine_loop import DecodeTrace
from runtime.attention import allocate_kv_cache, build_attention_context
from services.thinker.model import ThinkerLM
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.linear_state import build_state_context


@torch.inference_mode()
def replay_experts(model: ThinkerLM | HybridLM, sequences: dict[int, list[int]], max_batch_tokens: int = 8192,
                   block_size: int = 16, calibrate: Calibration | None = None,
                   calibrate_head: bool = False) -> dict[int, torch.Tensor]:
    """sequences: id -> token ids -> id -> [L, T, k] int16 expert ids at every position (on the host).

    With `calibrate` the same forwards calibrate each router on its inputs (RouterTap), and `calibrate_head` the
    LM head on the final hidden states; calibrate in one pack (max_batch_tokens >= all tokens), or later packs
    calibrate again on top of the first."""
    cfg = model.cfg
    device = model.lm_head.weight.device
    dtype = model.lm_head.weight.dtype
    tap = RouterTap(moe_layers(model), calibrate=calibrate)
    out: dict[int, torch.Tensor] = {}
    for batch in _packs(sequences, max_batch_tokens):
        lens = [len(sequences[s]) for s in batch]
        blocks = [-(-n // block_size) for n in lens]
        kv = allocate_kv_cache(len(cfg.kv_layers), sum(blocks), block_size, cfg.num_kv_heads, cfg.head_dim, dtype,
                               device)
        tables, first = [], 0
        for n in blocks:
            tables.append(list(range(first, first + n)))
            first += n
        ctx = build_attention_context(lens, lens, tables, block_size, device)
        ids = torch.tensor([t for s in batch for t in sequences[s]], device=device)
        positions = torch.cat([torch.arange(n).unsqueeze(0).expand(3, -1) for n in lens], dim=1).to(device)
        extra = {}
        if cfg.hybrid is not None:  # Qwen3.5: each sequence starts from a zeroed state slot of its own
            states = model.allocate_states(len(batch), device)
            extra["states"] = build_state_context(states, lens, list(range(len(batch))), [True] * len(batch), device)
        with tap.installed():
            # text only: one position on all three M-RoPE axes
            lm_out = model(model.embed(ids), positions, ctx, kv, **extra)
        if calibrate is not None and calibrate_head:
            calibrate(model.lm_head.weight, lm_out.hidden)
        picks = tap.take()  # [L, T, k]
        for seq, part in zip(batch, picks.split(lens, dim=1)):
            out[seq] = part
        del kv, extra
    return out


def trace_experts_touched(model: ThinkerLM | HybridLM, trace: DecodeTrace,
                          row_counts: Sequence[int] = ROW_COUNTS) -> dict[str, Any]:
    """Distinct experts the traced decode steps read per row count (step_experts_touched), their sequences replayed."""
    used = {seq for step in trace.steps for seq, _ in step}
    experts = replay_experts(model, {s: trace.tokens[s] for s in used})
    return step_experts_touched(trace.steps, experts, model.cfg.num_experts, model.cfg.num_experts_per_tok,
                                row_counts)


def _packs(sequences: dict[int, list[int]], max_tokens: int) -> list[list[int]]:
    """Sequence ids in packs of at most `max_tokens` tokens (a longer sequence goes alone)."""
    packs: list[list[int]] = [[]]
    size = 0
    for seq, ids in sequences.items():
        if packs[-1] and size + len(ids) > max_tokens:
            packs.append([])
            size = 0
        packs[-1].append(seq)
        size += len(ids)
    return [p for p in packs if p]
