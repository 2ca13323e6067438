"""The same workload through transformers `generate`: the same weights as ours where a checkpoint of them is given
(so routing is the same too), the same prompts, greedy; distinct experts its routers pick per decode step are
counted by hooks on them, the way a trained model's would be read."""
from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

import torch

from bench.moe_routing import distinct_per_layer, uniform_experts


def hf_generate(config: dict[str, Any], batches: list[int], prompts: list[list[int]], new_tokens: int,
                device: torch.device, dtype: torch.dtype, checkpoint: Path | None = None) -> dict[str, Any]:
    """Greedy `generate` of exactly `new_tokens` per row (min_new_tokens: no early EOS) at each batch size, rows
    from `prompts` (equal lengths). -> {"runs": [...], "weights": ...}."""
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeThinkerForConditionalGeneration

    full = Qwen3OmniMoeConfig.from_dict(config)
    with torch.device(device):
        model = Qwen3OmniMoeThinkerForConditionalGeneration._from_config(
            full.thinker_config, dtype=dtype, attn_implementation="sdpa")
    model.eval().requires_grad_(False)
    weights = "random (transformers' own init)"
    if checkpoint is not None:
        try:
            weights = load_thinker_weights(model, checkpoint)
        except (ValueError, OSError) as e:  # still a throughput baseline; its routing record says it is not ours
            weights += f": ours did not load ({e})"
    text = full.thinker_config.text_config
    try:
        results = time_generate(model, batches, prompts, new_tokens, device, text.num_experts,
                                text.num_experts_per_tok)
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {"runs": results, "weights": weights}


def time_generate(model: torch.nn.Module, batches: list[int], prompts: list[list[int]], new_tokens: int,
                  device: torch.device, num_experts: int = 0, top_k: int = 0) -> list[dict[str, Any]]:
    """Greedy `generate` of `model` at each batch size (after a 2-token warm-up), exactly `new_tokens` per row; an
    MoE model (num_experts > 0) also gets the distinct experts its routers read per decode step."""
    counter = DecodeExpertCounter(model, num_experts) if num_experts else None
    results = []
    try:
        for batch in batches:
            ids = torch.tensor([prompts[i % len(prompts)] for i in range(batch)], device=device)
            kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "do_sample": False}
            with torch.inference_mode():
                model.generate(**kwargs, max_new_tokens=2, min_new_tokens=2)  # warm-up
                _sync(device)
                if counter is not None:
                    counter.start(batch)
                t0 = time.perf_counter()
                out = model.generate(**kwargs, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
                _sync(device)
            seconds = time.perf_counter() - t0
            generated = (out.shape[1] - ids.shape[1]) * batch
            run = {"batch": batch, "prompt_tokens": ids.shape[1], "new_tokens": new_tokens, "seconds": seconds,
                   "output_tok_s": generated / seconds}
            if counter is not None:
                run["experts_touched"] = {"measured": counter.stop(),
                                          "uniform": uniform_experts(num_experts, top_k, batch)}
            results.append(run)
    finally:
        if counter is not None:
            counter.remove()
    return results


def load_thinker_weights(model: torch.nn.Module, checkpoint: Path) -> str:
    """Our checkpoint's `thinker.*` tensors into transformers' thinker (names without the prefix); the towers it
    lacks stay as drawn. Raises if a language-model tensor is missing."""
    from safetensors.torch import load_file

    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())
    device = next(model.parameters()).device
    names = set(model.state_dict())
    state: dict[str, torch.Tensor] = {}
    for file in sorted(set(index["weight_map"].values())):
        for name, t in load_file(str(checkpoint / file), device=str(device)).items():
            key = name.removeprefix("thinker.")
            nested = key.replace("model.", "model.language_model.", 1)  # transformers 5 nests the LM
            state[nested if key not in names and nested in names else key] = t
    missing, unexpected = model.load_state_dict(state, strict=False)
    text_missing = [m for m in missing if "audio_tower." not in m and "visual." not in m]
    if text_missing or unexpected:
        raise ValueError(f"checkpoint does not fit transformers' thinker: missing {text_missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return f"ours, from {checkpoint.name} ({len(state)} tensors)"


class DecodeExpertCounter:
    """Forward hooks on every router: while counting, each call that routes exactly `rows` tokens (a decode step of
    the batch) adds its distinct experts; stop() gives the mean over layers and steps."""

    def __init__(self, model: torch.nn.Module, num_experts: int) -> None:
        self.num_experts = num_experts
        self.rows = 0
        self.counts: list[float] = []
        routers = [m for name, m in model.named_modules() if name.endswith("mlp.gate")]
        self.handles = [r.register_forward_hook(self._hook) for r in routers]

    def _hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.rows:
            return
        experts = output[-1] if isinstance(output, tuple) else torch.topk(output, module.top_k, dim=-1).indices
        if experts.shape[0] == self.rows:
            self.counts.append(distinct_per_layer(experts.unsqueeze(0), self.num_experts).item())

    def start(self, rows: int) -> None:
        self.rows, self.counts = rows, []

    def stop(self) -> float | None:
        self.rows = 0
        return sum(self.counts) / len(self.counts) if self.counts else None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
