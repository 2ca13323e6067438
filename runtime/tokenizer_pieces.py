"""A long text cut into pieces that encode to the ids of the whole, so `tokenizers` can encode them on all cores.

Byte-level BPE costs ~2-3 us a token on one core (a 1k-token prompt took 4.4 ms of an H100 host's gateway, on the way
to its first token), and `encode` runs on one thread. Under the Qwen split patterns, a space between two letters always
begins a pre-token: the letter run before it cannot take the space, and the space joins the word after it. So cutting
right before such a space changes no pre-token; NFC composes nothing across a space; BPE never merges across
pre-tokens. The pieces' ids, concatenated, are the whole text's ids (tests/unit/runtime/test_tokenizer_pieces.py checks
it against one encode on texts of every script, spacing and punctuation).
"""
from __future__ import annotations

import json

from tokenizers import Tokenizer as HfTokenizersTokenizer

from runtime.checkpoint.tokenizer_convert import QWEN2_PATTERN

PIECE_CHARS = 1024  # a text of at least twice this many characters is cut into pieces of about this length
# Qwen3.5's: Qwen2's with combining marks (\p{M}) kept in words
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
CUTTABLE_PATTERNS = frozenset({QWEN2_PATTERN, QWEN3_5_PATTERN})


def can_cut(tok: HfTokenizersTokenizer) -> bool:
    """Whether `tok` is a pipeline the cut above keeps exact: NFC or no normalizer, a Split by one of
    CUTTABLE_PATTERNS then byte-level (no regex of its own), BPE, and no added token that holds whitespace, starts
    with a letter or takes the whitespace beside it (added tokens are matched before the split). Anything else
    (another model family's tokenizer) is encoded whole."""
    normalizer = json.loads(tok.normalizer.__getstate__()) if tok.normalizer is not None else None
    if normalizer is not None and normalizer.get("type") != "NFC":
        return False
    if tok.pre_tokenizer is None or type(tok.model).__name__ != "BPE":
        return False
    pre = json.loads(tok.pre_tokenizer.__getstate__())
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(steps) != 2:
        return False
    split, byte_level = steps
    if not (split.get("type") == "Split" and split.get("pattern", {}).get("Regex") in CUTTABLE_PATTERNS
            and split.get("behavior") == "Isolated" and not split.get("invert")):
        return False
    if not (byte_level.get("type") == "ByteLevel" and not byte_level.get("use_regex")
            and not byte_level.get("add_prefix_space")):
        return False
    return all(not (t.lstrip or t.rstrip or t.single_word or any(c.isspace() for c in t.content)
                    or t.content[:1].isalpha())
               for t in tok.get_added_tokens_decoder().values())


def cut_pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """`text` in pieces of at least `size` characters, each cut right before a space between two letters (the last
    piece takes the rest; a text with no such space, such as unspaced Chinese, stays whole)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start >= 2 * size:
        cut = text.find(" ", start + size)
        while 0 < cut < len(text) - 1 and not (text[cut - 1].isalpha() and text[cut + 1].isalpha()):
            cut = text.find(" ", cut + 1)
        if not 0 < cut < len(text) - 1:
            break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces
