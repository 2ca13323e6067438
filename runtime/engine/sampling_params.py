"""Resolved sampling of one request (pure Python: the scheduler and request state import no torch)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple


class Rule(NamedTuple):
    ok: Callable[[float], bool]
    allowed: str  # what the error says is allowed


# The one place a sampling value's range is written: the wire checks (runtime/sampling.py: the thinker's and both
# talker messages) and the talker's TalkerSampling read it.
RULES: dict[str, Rule] = {
    "temperature": Rule(lambda v: v >= 0 and math.isfinite(v), "must be >= 0 (0 is greedy), not NaN or infinite"),
    "top_k": Rule(lambda v: v >= 0, "must be >= 0 (0 disables)"),
    "top_p": Rule(lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "min_p": Rule(lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    "repetition_penalty": Rule(lambda v: v > 0 and math.isfinite(v), "must be > 0 (1 disables), not NaN or infinite"),
    "presence_penalty": Rule(lambda v: -2 <= v <= 2, "must be in [-2, 2]"),
    "frequency_penalty": Rule(lambda v: -2 <= v <= 2, "must be in [-2, 2]"),
    "max_tokens": Rule(lambda v: v >= 1, "must be >= 1"),
}


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float = 1.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = 0  # always set: a request without one is given a fresh seed of its own
    max_tokens: int = 256
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def needs_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
