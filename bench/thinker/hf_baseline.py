"""The same workload through transformers `generate` (random weights, same dims): the baseline for the ratio."""
from __future__ import annotations

import gc
import time
from typing import Any

import torch


def hf_generate(config: dict[str, Any], batches: list[int], prompt_tokens: int, new_tokens: int,
                device: torch.device, dtype: torch.dtype, seed: int = 0) -> list[dict[str, Any]]:
    """Greedy `generate` of exactly `new_tokens` per row (min_new_tokens: no early EOS) at each batch size."""
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeThinkerForConditionalGeneration

    full = Qwen3OmniMoeConfig.from_dict(config)
    with torch.device(device):
        model = Qwen3OmniMoeThinkerForConditionalGeneration._from_config(
            full.thinker_config, dtype=dtype, attn_implementation="sdpa")
    model.eval().requires_grad_(False)
    vocab = full.thinker_config.text_config.vocab_size
    gen = torch.Generator(device=device).manual_seed(seed)
    results = []
    try:
        for batch in batches:
            ids = torch.randint(1000, min(vocab, 100_000), (batch, prompt_tokens), device=device, generator=gen)
            mask = torch.ones_like(ids)
            kwargs = {"input_ids": ids, "attention_mask": mask, "do_sample": False}
            with torch.inference_mode():
                model.generate(**kwargs, max_new_tokens=2, min_new_tokens=2)  # warm-up
                _sync(device)
                t0 = time.perf_counter()
                out = model.generate(**kwargs, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
                _sync(device)
            seconds = time.perf_counter() - t0
            generated = (out.shape[1] - prompt_tokens) * batch
            results.append({"batch": batch, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
                            "seconds": seconds, "output_tok_s": generated / seconds})
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
