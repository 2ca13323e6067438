"""A long text encoded in pieces gives the ids of one encode: on texts of every script, spacing and punctuation, under
both Qwen split patterns; and a pipeline the cut could change is encoded whole."""
from __future__ import annotations

import json
import random

import pytest
from tokenizers import Tokenizer as HfTokenizersTokenizer

from runtime.checkpoint.tokenizer_convert import QWEN2_PATTERN, cached_tokenizer_json
from runtime.tokenizer import Tokenizer
from runtime.tokenizer_pieces import QWEN3_5_PATTERN, can_cut, cut_pieces

# words and runs that stress the split: contractions, marks, digits, emoji, CJK, RTL, punctuation, special tokens
ODD = ["it's", "we'LL", "e\u0301te\u0301", "cafe\u0301", "Ångström", "naïve", "2026", "3.14", "x2y", "😀", "👩‍💻",
       "中文字符", "日本語", "한국어", "مرحبا", "שלום", "Привет", "ΑΒΓ", "नमस्ते", "ไทย", "--", "...", "?!", "(a)",
       "<|im_end|>", "<|im_start|>", "<think>", "_x_", "a\u200db", "\u00a0", "ﬁ", "Ⅻ", "½", "，", "。", "、", "；",
       "：", "？", "！", "中文，字符。日本語、", "「引用」", "（括弧）", "ｆｕｌｌ"]
SPACES = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", " \n", "\n\n", "\r\n", " \t "]


def random_text(rng: random.Random, vocab_words: list[str], n: int) -> str:
    out = []
    for _ in range(n):
        out.append(rng.choice(ODD) if rng.random() < 0.15 else rng.choice(vocab_words))
        out.append(rng.choice(SPACES) if rng.random() < 0.3 else " ")
    return "".join(out)


@pytest.fixture(scope="module")
def qwen2() -> HfTokenizersTokenizer:
    return HfTokenizersTokenizer.from_file(str(cached_tokenizer_json()))


def with_pipeline(tok: HfTokenizersTokenizer, edit) -> HfTokenizersTokenizer:  # noqa: ANN001 - a dict editor
    spec = json.loads(tok.to_str())
    edit(spec)
    return HfTokenizersTokenizer.from_str(json.dumps(spec))


def set_pattern(pattern: str):  # noqa: ANN201
    def edit(spec: dict) -> None:
        spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern
    return edit


@pytest.fixture(scope="module")
def vocab_words(qwen2: HfTokenizersTokenizer) -> list[str]:
    rng = random.Random(0)
    words = [qwen2.decode([rng.randrange(150_000)]).strip() for _ in range(3000)]
    return [w for w in words if w]


@pytest.mark.parametrize("pattern", [QWEN2_PATTERN, QWEN3_5_PATTERN], ids=["qwen2", "qwen3.5"])
def test_pieces_encode_to_the_whole_texts_ids(qwen2: HfTokenizersTokenizer, vocab_words: list[str],
                                               pattern: str) -> None:
    tok = qwen2 if pattern == QWEN2_PATTERN else with_pipeline(qwen2, set_pattern(pattern))
    assert can_cut(tok)
    rng = random.Random(1)
    cuts = 0
    for trial in range(60):
        text = random_text(rng, vocab_words, rng.randrange(20, 400))
        whole = tok.encode(text, add_special_tokens=False).ids
        pieces = cut_pieces(text, size=rng.choice([8, 32, 128]))  # small pieces: many cuts to check
        assert "".join(pieces) == text
        cuts += len(pieces) - 1
        joined = [i for e in tok.encode_batch(pieces, add_special_tokens=False) for i in e.ids]
        assert joined == whole, f"trial {trial}: {[tok.decode([i]) for i in joined if i not in whole][:8]}"
    assert cuts > 500


def test_the_tokenizer_encodes_a_long_prompt_as_one_encode_would(qwen2: HfTokenizersTokenizer,
                                                                  vocab_words: list[str]) -> None:
    tok = Tokenizer(qwen2, [])
    text = random_text(random.Random(2), vocab_words, 3000)
    assert len(cut_pieces(text)) > 4
    assert tok.encode(text) == tok._tok.encode(text, add_special_tokens=False).ids
    rng = random.Random(3)
    chinese = "".join(rng.choice(["中文", "字符", "，", "。", "日本語", "、", "の", "！"]) for _ in range(6000))
    assert len(cut_pieces(chinese)) > 2
    assert tok.encode(chinese) == tok._tok.encode(chinese, add_special_tokens=False).ids
    literal = tok._literal_twin().encode(text, add_special_tokens=False).ids
    assert tok.encode(text, allow_special=False) == literal


def test_cuts_fall_before_a_space_between_letters() -> None:
    text = ("word " * 50) + "中文字符" * 100 + " 3 4 5" * 40
    pieces = cut_pieces(text, size=16)
    assert "".join(pieces) == text and len(pieces) > 5
    for before, after in zip(pieces, pieces[1:]):
        assert before[-1].isalpha() and after[0] == " " and after[1].isalpha()
    assert cut_pieces("½ Ⅻ " * 100, size=16)[1].startswith(" Ⅻ")  # numerals that are not digits end a pre-token too
    for no_cut in (" " * 5000, "1 2 " * 1000, "，" * 5000, "a\n" * 2000):
        assert cut_pieces(no_cut, size=16) == [no_cut]
    assert all(len(p) >= 16 for p in pieces[:-1])
    assert cut_pieces("中文字符" * 1000, size=16) == ["中文字符" * 1000]  # no space or CJK punctuation: whole
    chinese = "中文字符，日本語の文。" * 200
    pieces = cut_pieces(chinese, size=16)
    assert "".join(pieces) == chinese and len(pieces) > 5 and all(p[0] in "，。" for p in pieces[1:])
    assert cut_pieces("short text", size=16) == ["short text"]


@pytest.mark.parametrize("change", [
    "gpt2 pattern", "nfkc", "no normalizer", "prefix space", "added token lstrip", "added token with a space",
    "added token starting with a letter"])
def test_a_pipeline_the_cut_could_change_is_encoded_whole(qwen2: HfTokenizersTokenizer, change: str) -> None:
    def edit(spec: dict) -> None:
        if change == "gpt2 pattern":
            spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = (
                r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        elif change == "nfkc":
            spec["normalizer"] = {"type": "NFKC"}
        elif change == "no normalizer":
            spec["normalizer"] = None
        elif change == "prefix space":
            spec["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
        elif change == "added token lstrip":
            spec["added_tokens"][0]["lstrip"] = True
        elif change == "added token with a space":
            spec["added_tokens"][0]["content"] = "<| a b |>"
        else:
            spec["added_tokens"][0]["content"] = "assistant"

    tok = with_pipeline(qwen2, edit)
    assert can_cut(tok) == (change == "no normalizer")  # no normalizer composes nothing either
    text = "alpha beta " * 400
    ours = Tokenizer(tok, [])
    assert ours.encode(text) == tok.encode(text, add_special_tokens=False).ids
