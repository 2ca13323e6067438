"""The Thinker LM in plain PyTorch over a paged KV cache (Qwen3-Omni / Qwen3-ASR's ThinkerLM, Qwen3.5's hybrid
HybridLM; `load_thinker_lm` picks by config), its config, weights loading and M-RoPE prompt layout."""
from __future__ import annotations

from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.lm import DeepstackInput, LMOutput, ThinkerLM
from services.thinker.model.loader import load_thinker_lm
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
    "HybridLM",
    "LMOutput",
    "MediaKind",
    "MediaSpanGrid",
    "PromptPositions",
    "ThinkerConfig",
    "ThinkerLM",
    "audio_token_count",
    "decode_positions",
    "load_thinker_lm",
    "prompt_positions",
]
