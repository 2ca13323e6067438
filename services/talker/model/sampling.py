"""A talker request's sampling settings (the talker and its code predictor pick through runtime/sampler) and the
greedy parity tests' margin measure."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.engine.sampling_params import RULES


@dataclass(frozen=True)
class TalkerSampling:
    """Per-request sampling; the defaults are the model's (`Qwen3OmniMoeForConditionalGeneration.generate`)."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05  # on the codes (codebook 0) this request generated
    predictor_temperature: float = 1.0
    predictor_top_k: int = 50
    predictor_top_p: float = 0.8
    seed: int | None = None  # None: the request gets its own fresh seed, never a shared stream

    def __post_init__(self) -> None:
        for name in ("temperature", "predictor_temperature"):  # greedy is do_sample=False here, not temperature 0
            if not getattr(self, name) > 0:
                raise ValueError(f"TalkerSampling.{name}={getattr(self, name)}: must be > 0")
        for name, rule in (("top_p", "top_p"), ("predictor_top_p", "top_p"), ("top_k", "top_k"),
                           ("predictor_top_k", "top_k"), ("repetition_penalty", "repetition_penalty")):
            if not RULES[rule].ok(getattr(self, name)):
                raise ValueError(f"TalkerSampling.{name}={getattr(self, name)}: {RULES[rule].allowed}")


GREEDY = TalkerSampling(do_sample=False)


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """Gap between the best and second-best score per row: small gaps mark near-ties in greedy parity."""
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]
