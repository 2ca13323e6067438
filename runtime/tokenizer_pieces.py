"""A long text cut into pieces that encode to the ids of the whole, so `tokenizers` can encode them on all cores.

Byte-level BPE costs ~2-3 us a token on one core (a 1k-token prompt took 4.4 ms of an H100 host's gateway, on the way
to its first token), and `encode` runs on one thread. Under the Qwen split patterns, a space between two letters always
begins a pre-token: the letter run before it cannot take the space, and the space joins the word after it. So does
CJK punctuation between two letters (`，` in `中文，字符` joins `字符`): unspaced Chinese or Japanese cuts there. Cutting
right before such a character changes no pre-token; NFC composes nothing across it; BPE never merges across
pre-tokens. The pieces' ids, concatenated, are the whole text's ids (tests/unit/runtime/test_tokenizer_pieces.py checks
it against one encode on texts of every script, spacing and punctuation).
"""
from __future__ import annotations

import json
import re

from tokenizers import Tokenizer as HfTokenizersTokenizer

from runtime.checkpoint.tokenizer_convert import QWEN2_PATTERN

PIECE_CHARS = 1024  # a text of at least twice this many characters is cut into pieces of about this length
# Qwen3.5's: Qwen2's with combining marks (\p{M}) kept in words
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
CUTTABLE_PATTERNS = frozenset({QWEN2_PATTERN, QWEN3_5_PATTERN})
CUT_BEFORE = " ，。、；：？！"  # a cut goes right before one of these, between two letters
# "letters" here: `[^\W\d_]`, the letters and the numerals that are not digits (½, Ⅻ), which also end their
# pre-token; found in one regex scan, so a text with no place to cut (a million spaces) costs no Python loop
_CUT = re.compile(rf"(?<=[^\W\d_])[{CUT_BEFORE}](?=[^\W\d_])")


def can_cut(tok: HfTokenizersTokenizer) -> bool:
    """Whether `tok` is a pipeline the cut above keeps exact: NFC or no normalizer, a Split by one of
    CUTTABLE_PATTERNS then byte-level (no regex of its own), BPE, and no added token that holds whitespace or a
    CUT_BEFORE character, starts with a letter or takes the whitespace beside it (added tokens are matched before the
    split). Anything else (another model family's tokenizer) is encoded whole."""
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
    return all(not (t.lstrip or t.rstrip or t.single_word or any(c.isspace() or c in CUT_BEFORE for c in t.content)
                    or t.content[:1].isalpha())
               for t in tok.get_added_tokens_decoder().values())


def cut_pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """`text` in pieces of at least `size` characters, each cut right before a CUT_BEFORE character between two
    letters (the last piece takes the rest; a text with no such place stays whole)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start >= 2 * size and (found := _CUT.search(text, start + size)) is not None:
        pieces.append(text[start:found.start()])
        start = found.start()
    pieces.append(text[start:])
    return pieces
