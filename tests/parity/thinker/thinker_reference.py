"""Reference-side records for Thinker parity: chat prompts and what transformers produced on them."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from runtime.checkpoint import token_ids as ids

NEW_TOKENS = 8


@dataclass
class ReferenceRun:
    prompt: list[int]
    prefill_logits: torch.Tensor  # [L, V] every prompt position, one forward
    step_logits: list[torch.Tensor]  # NEW_TOKENS x [V]: generate's raw logits, prefill's last row then each decode step
    tokens: list[int]  # NEW_TOKENS greedy tokens


def chat_prompt(num_user_tokens: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    user = [rng.randrange(ids.NUM_REGULAR_TOKENS) for _ in range(num_user_tokens)]
    return ([ids.IM_START, ids.USER, ids.NEWLINE] + user
            + [ids.IM_END, ids.NEWLINE, ids.IM_START, ids.ASSISTANT, ids.NEWLINE])
