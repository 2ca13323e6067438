"""The checkpoint's tokenizer (`tokenizer.json` via the `tokenizers` library), streaming detokenizer, stop strings."""
from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer as HfTokenizersTokenizer

from runtime.tokenizer_pieces import can_cut, cut_pieces

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"
RELEASE_GIL_CHARS = 4096  # texts at least this long are encoded without holding the GIL


def _byte_level_alphabet() -> dict[str, int]:
    """Inverse of the byte-level BPE alphabet: printable Latin-1 bytes are themselves, the rest sit at 256.."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in set(printable)]
    alphabet = {chr(b): b for b in printable}
    alphabet.update({chr(256 + i): b for i, b in enumerate(others)})
    return alphabet


class Tokenizer:
    """Encode/decode with the checkpoint's tokenizer; special-token ids by name; the ids that end a turn."""

    def __init__(self, tok: HfTokenizersTokenizer, eos_token_ids: Sequence[int]) -> None:
        self._tok = tok
        self._literal: HfTokenizersTokenizer | None = None
        added = tok.get_added_tokens_decoder()
        self.special_tokens: dict[str, int] = {t.content: i for i, t in sorted(added.items()) if t.special}
        self.special_ids: frozenset[int] = frozenset(self.special_tokens.values())
        self.eos_token_ids: tuple[int, ...] = tuple(eos_token_ids)
        self.vocab_size: int = tok.get_vocab_size(with_added_tokens=True)
        self._token_bytes: list[bytes] | None = None
        self._can_cut = can_cut(tok)  # long texts are encoded in pieces, in parallel

    @classmethod
    def from_dir(cls, ckpt_dir: Path) -> Tokenizer:
        """Loads `tokenizer.json`; end-of-turn ids from generation_config.json's `eos_token_id` and the
        tokenizer's `eos_token` (so both `<|im_end|>` and `<|endoftext|>` stop a Qwen turn)."""
        ckpt_dir = Path(ckpt_dir)
        tok = HfTokenizersTokenizer.from_file(str(ckpt_dir / TOKENIZER_JSON))
        eos: list[int] = []
        config_path = ckpt_dir / TOKENIZER_CONFIG
        if config_path.exists():
            eos_token = json.loads(config_path.read_text()).get("eos_token")
            if isinstance(eos_token, dict):
                eos_token = eos_token.get("content")
            if eos_token is not None and tok.token_to_id(eos_token) is not None:
                eos.append(tok.token_to_id(eos_token))
        gen_path = ckpt_dir / GENERATION_CONFIG
        if gen_path.exists():
            gen_eos = json.loads(gen_path.read_text()).get("eos_token_id")
            for token_id in [gen_eos] if isinstance(gen_eos, int) else gen_eos or []:
                if token_id not in eos:
                    eos.append(token_id)
        return cls(tok, eos)

    def encode(self, text: str, allow_special: bool = True) -> list[int]:
        """Token ids of `text`, no BOS/EOS added. With `allow_special=False` a string like `<|im_end|>` in the
        text is tokenized as ordinary characters rather than as the special token."""
        tok = self._tok if allow_special else self._literal_twin()
        pieces = cut_pieces(text) if self._can_cut else [text]
        if len(pieces) == 1 and len(text) < RELEASE_GIL_CHARS:
            return tok.encode(text, add_special_tokens=False).ids
        # `encode` holds the GIL throughout (a 5 MB text stalled every other thread for 8 s); `encode_batch` lets go,
        # and encodes the pieces on all cores (runtime/tokenizer_pieces.py)
        return [i for encoding in tok.encode_batch(pieces, add_special_tokens=False) for i in encoding.ids]

    def _literal_twin(self) -> HfTokenizersTokenizer:
        """A copy that splits special-token strings like ordinary text; `encode_special_tokens` is a per-object
        flag, so a twin keeps concurrent encodes on the main tokenizer unaffected."""
        if self._literal is None:
            twin = HfTokenizersTokenizer.from_str(self._tok.to_str())
            twin.encode_special_tokens = True
            self._literal = twin
        return self._literal

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int:
        """The id of one token string (special or regular); KeyError when the vocabulary lacks it."""
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise KeyError(f"token {token!r} is not in the vocabulary")
        return token_id

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes one id stands for (a regular token may be part of a multi-byte character).

        Ids past the tokenizer's vocabulary (the model's embedding rows are padded to 152,064) stand for nothing:
        a model can still sample them, and the stream must not break when it does.
        """
        if self._token_bytes is None:
            self._token_bytes = self._build_token_bytes()
        return self._token_bytes[token_id] if 0 <= token_id < len(self._token_bytes) else b""

    def _build_token_bytes(self) -> list[bytes]:
        alphabet = _byte_level_alphabet()
        table = [b""] * self.vocab_size
        for token, token_id in self._tok.get_vocab(with_added_tokens=False).items():
            table[token_id] = bytes(alphabet[ch] for ch in token)
        for token, token_id in self.special_tokens.items():
            table[token_id] = token.encode()
        return table

    def detokenizer(self, skip_special_tokens: bool = False) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self, skip_special_tokens)


class IncrementalDetokenizer:
    """Turns a stream of ids into text deltas that never split a UTF-8 character.

    Works on the tokens' bytes with an incremental UTF-8 decoder, so the concatenation of every `feed`
    result plus `flush()` equals `tokenizer.decode(all ids)` exactly, whatever way the ids were split.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.num_tokens = 0

    def feed(self, ids: int | Iterable[int]) -> str:
        """The text completed by these ids (may be empty while a character is still incomplete)."""
        ids = [ids] if isinstance(ids, int) else list(ids)
        self.num_tokens += len(ids)
        if self._skip_special:
            ids = [i for i in ids if i not in self._tokenizer.special_ids]
        data = b"".join(self._tokenizer.token_bytes(i) for i in ids)
        return self._utf8.decode(data)

    def flush(self) -> str:
        """End of stream: whatever bytes are still pending, as replacement characters."""
        return self._utf8.decode(b"", final=True)


def find_stop(text: str, stops: Sequence[str], search_from: int = 0) -> int | None:
    """Index in `text` where the earliest stop string starts, or None.

    Streaming: pass `search_from = len(text) - len(delta)` after appending a delta; the search backs up by
    the longest stop's length minus one, so a stop string split across deltas is still found.
    """
    if not stops:
        return None
    start = max(0, search_from - max(len(s) for s in stops) + 1)
    hits = [i for i in (text.find(s, start) for s in stops if s) if i >= 0]
    return min(hits) if hits else None


def stop_holdback(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of `text` to hold back: the longest suffix that starts some stop string.

    Emitting only `text[:len(text) - stop_holdback(text, stops)]` never shows a client part of a stop string
    that the next delta may complete.
    """
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest
