"""Compiles a hybrid model's eager steps before the thinker serves.

A hybrid model's prefill (and mixed prefill + decode) steps run eagerly, outside the CUDA graphs, through Triton
kernels that compile and autotune on first use: fla's chunked delta rule, our conv, norm and gate kernels. Left to
the first requests, that cost one a 63.5 s first step and later ones 2 s steps on a new shape (a random Qwen3.5 9B
on an H200, bench/results/2026-12-04-qwen3.5-9b-mesh-h200.json). Triton specialises integer arguments equal to 1 or
divisible by 16, so the warm-up steps cover both kinds of row length, one and several rows, and decode rows beside
prefill rows. Every row runs on one scratch state slot and one scratch KV block that no request is ever given.
The paged attention's split counts, which depend on the step's shape rather than on these rows, are compiled apart
(runtime/kernels/paged_attention_triton.compile_prefill_variants), for every model.
"""
from __future__ import annotations

import time

import torch

from runtime.attention import build_attention_context
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.linear_state import LinearStateCache, build_state_context

# each entry is one step's row lengths (1: a decode row); the long rows reach the fused MoE's larger tile configs,
# which it picks by tokens per expert (runtime/kernels/moe_config.py)
WARMUP_STEPS: tuple[tuple[int, ...], ...] = ((16,), (17,), (1, 32, 17), (1, 1, 48, 1), (1024,), (4096,))


def warmup_steps(max_batch_tokens: int) -> tuple[tuple[int, ...], ...]:
    """WARMUP_STEPS, and a step of the engine's largest size when it is larger: on an H100 the first 8,192-token step
    after a warm-up up to 4,096 took 10.7 s (2026-12-05-qwen3.5-9b-mesh.json), a live request's first token behind it;
    the caching allocator also grows to that step's activations here, not under load."""
    largest = max(sum(step) for step in WARMUP_STEPS)
    return WARMUP_STEPS + (((max_batch_tokens,),) if max_batch_tokens > largest else ())


@torch.inference_mode()
def warm_hybrid_steps(model: HybridLM, states: LinearStateCache, kv_caches: list, block_size: int,
                      scratch_slot: int, scratch_block: int, device: torch.device, logits: bool = True,
                      max_batch_tokens: int = 0) -> float:
    """Runs `warmup_steps(max_batch_tokens)` through `model` on `scratch_slot` and `scratch_block` only; returns the
    seconds taken. logits: also the LM head (False on a tensor-parallel worker, which has none)."""
    start = time.perf_counter()
    for q_lens in warmup_steps(max_batch_tokens):
        total = sum(q_lens)
        ids = torch.zeros(total, dtype=torch.long, device=device)
        positions = torch.cat([torch.arange(n).expand(3, n) for n in q_lens], dim=1).to(device)
        # every row's tokens land in the scratch block: overwritten garbage that nothing else reads
        tables = [[scratch_block] * -(-n // block_size) for n in q_lens]
        ctx = build_attention_context(q_lens=list(q_lens), kv_lens=list(q_lens), block_tables=tables,
                                      block_size=block_size, device=device)
        slots = build_state_context(states, list(q_lens), [scratch_slot] * len(q_lens), [True] * len(q_lens), device)
        out = model(model.embed(ids), positions, ctx, kv_caches, states=slots)
        if logits:
            model.compute_logits(out.hidden[-1:])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start
