"""Qwen3-ASR's token ids: Qwen3's text vocabulary with Omni's audio markers, `<|audio_pad|>` at 151676 and
`<asr_text>` / `<timestamp>` at 151704 / 151705 (the ids its `config.json` and ports name)."""
from __future__ import annotations

from runtime.checkpoint.token_ids import NUM_REGULAR_TOKENS, SPECIAL_TOKENS as OMNI_SPECIAL_TOKENS

VOCAB_SIZE = 151936  # Qwen3's embedding rows

AUDIO_PAD = 151676
ASR_TEXT = 151704
TIMESTAMP = 151705
# Omni's list up to <tts_text_bos_single> (151674) holds the same ids in Qwen3-ASR.
_SHARED = OMNI_SPECIAL_TOKENS[:32]


def _reserved(token_id: int) -> str:
    """A stand-in for an id between the named ones whose text the demo does not need (never produced by a prompt)."""
    return f"<|omnimesh_reserved_{token_id}|>"


def _special_tokens() -> tuple[str, ...]:
    named = {AUDIO_PAD: "<|audio_pad|>", ASR_TEXT: "<asr_text>", TIMESTAMP: "<timestamp>"}
    first = NUM_REGULAR_TOKENS + len(_SHARED)
    tail = tuple(named.get(i, _reserved(i)) for i in range(first, TIMESTAMP + 1))
    return _SHARED + tail


# Added tokens from 151643 in id order; `<asr_text>` and `<timestamp>` are plain added tokens so that decoding with
# skip_special_tokens keeps them (the processor's `parse_output` splits on `<asr_text>`).
SPECIAL_TOKENS: tuple[str, ...] = _special_tokens()
PLAIN_TOKENS: frozenset[str] = frozenset({"<asr_text>", "<timestamp>"})
SPECIAL_TOKEN_IDS: dict[str, int] = {tok: NUM_REGULAR_TOKENS + i for i, tok in enumerate(SPECIAL_TOKENS)}
assert SPECIAL_TOKEN_IDS["<|audio_pad|>"] == AUDIO_PAD and SPECIAL_TOKEN_IDS["<asr_text>"] == ASR_TEXT
