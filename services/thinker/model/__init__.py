"""The Thinker LM in plain PyTorch over a paged KV cache, its config, weights loading and M-RoPE prompt layout."""
from __future__ import annotations

from services.thinker.model.config import ThinkerConfig
from services.thinker.model.lm import DeepstackInput, LMOutput, ThinkerLM
from services.thinker.model.rope_index import (
    MediaKind,
    MediaSpanGrid,
    PromptPositions,
    audio_token_count,
    decode_positions,
    prompt_positions,
)

__all__ = [
    "DeepstackInput",
    "LMOutput",
    "MediaKind",
    "MediaSpanGrid",
    "PromptPositions",
    "ThinkerConfig",
    "ThinkerLM",
    "audio_token_count",
    "decode_positions",
    "prompt_positions",
]
