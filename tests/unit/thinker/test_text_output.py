"""TextOutput: streamed text is final, stop strings split across deltas are cut and never shown, multi-byte safe."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from runtime.tokenizer import Tokenizer
from services.thinker.text_output import TextOutput, TextPiece


@pytest.fixture(scope="module")
def tok(demo_ckpt: Path) -> Tokenizer:
    return Tokenizer.from_dir(demo_ckpt)


@pytest.fixture(scope="module")
def byte_ids(tok: Tokenizer) -> dict[int, int]:
    """Byte value -> the id of the byte-level token that is exactly that byte."""
    table = {}
    for i in range(1024):
        b = tok.token_bytes(i)
        if len(b) == 1:
            table[b[0]] = i
    assert len(table) == 256
    return table


def as_bytes(text: str, byte_ids: dict[int, int]) -> list[int]:
    """`text` as one token per UTF-8 byte, so a character can be split anywhere."""
    return [byte_ids[b] for b in text.encode()]


def stream(out: TextOutput, chunks: list[list[int]]) -> tuple[list[TextPiece], str]:
    pieces = [out.feed(c) for c in chunks]
    return pieces, out.finish()


def shown(pieces: list[TextPiece], tail: str) -> str:
    return "".join(p.text for p in pieces) + tail


def test_text_without_stops_streams_at_once(tok: Tokenizer) -> None:
    out = TextOutput(tok, ())
    assert out.feed(tok.encode("Hello")) == TextPiece("Hello", False)
    assert out.feed(tok.encode(" world")) == TextPiece(" world", False)
    assert out.finish() == "" and not out.stopped


def test_a_stop_string_split_across_deltas_is_cut_and_never_shown(tok: Tokenizer) -> None:
    out = TextOutput(tok, ("STOP",))
    first = out.feed(tok.encode("Hello ST"))
    assert first == TextPiece("Hello ", False)  # "ST" could start "STOP": held back
    second = out.feed(tok.encode("OP and more"))
    assert second == TextPiece("", True) and out.stopped
    assert out.feed(tok.encode("later")) == TextPiece("", True)
    assert out.finish() == ""


def test_a_prefix_that_does_not_become_the_stop_is_released(tok: Tokenizer) -> None:
    out = TextOutput(tok, ("STOP",))
    assert out.feed(tok.encode("Hello ST")).text == "Hello "
    assert out.feed(tok.encode("ART")).text == "START"
    assert out.finish() == "" and not out.stopped


def test_held_back_text_is_released_at_finish(tok: Tokenizer) -> None:
    out = TextOutput(tok, ("STOP", "\n\n"))
    assert out.feed(tok.encode("Hello STO")).text == "Hello "
    assert out.feed(tok.encode("\n")).text == "STO"  # "STO" can no longer become "STOP"; "\n" may start "\n\n"
    assert out.finish() == "\n"
    assert not out.stopped


def test_a_stop_inside_one_delta(tok: Tokenizer) -> None:
    out = TextOutput(tok, ("STOP",))
    assert out.feed(tok.encode("abc STOP def")) == TextPiece("abc ", True)
    assert out.finish() == ""


def test_a_stop_at_the_very_start(tok: Tokenizer) -> None:
    out = TextOutput(tok, ("Hello",))
    assert out.feed(tok.encode("Hello world")) == TextPiece("", True)


def test_the_earliest_of_several_stops_wins(tok: Tokenizer) -> None:
    out = TextOutput(tok, ("world", "lo w", "xyz"))
    assert out.feed(tok.encode("Hello world")) == TextPiece("Hel", True)


def test_a_stop_completed_by_the_last_token_is_cut_at_finish_too(tok: Tokenizer, byte_ids: dict[int, int]) -> None:
    out = TextOutput(tok, ("日本",))
    ids = as_bytes("x日本", byte_ids)
    pieces = [out.feed([i]) for i in ids]
    assert shown(pieces, "") == "x" and out.stopped


def test_multi_byte_characters_come_out_whole(tok: Tokenizer, byte_ids: dict[int, int]) -> None:
    out = TextOutput(tok, ())
    pieces = [out.feed([i]) for i in as_bytes("🙂é", byte_ids)]
    assert [p.text for p in pieces] == ["", "", "", "🙂", "", "é"]
    assert out.finish() == ""


def test_an_incomplete_character_at_finish_becomes_a_replacement(tok: Tokenizer, byte_ids: dict[int, int]) -> None:
    out = TextOutput(tok, ())
    assert out.feed([byte_ids[0x41], byte_ids[0xF0], byte_ids[0x9F]]).text == "A"
    assert out.finish() == "\ufffd"


def test_a_multi_byte_stop_split_mid_character(tok: Tokenizer, byte_ids: dict[int, int]) -> None:
    out = TextOutput(tok, ("語!",))
    ids = as_bytes("日本語!後", byte_ids)
    pieces, tail = stream(out, [[i] for i in ids])
    assert shown(pieces, tail) == "日本"
    assert all("語" not in p.text for p in pieces)


def test_empty_feed_is_harmless(tok: Tokenizer) -> None:
    out = TextOutput(tok, ("x",))
    assert out.feed([]) == TextPiece("", False)
    assert out.finish() == ""


@pytest.mark.parametrize("seed", range(12))
def test_any_split_shows_exactly_the_text_before_the_first_stop(tok: Tokenizer, byte_ids: dict[int, int],
                                                                 seed: int) -> None:
    rng = random.Random(seed)
    stops = ("</answer>", "日本語", "\n\nUser:")
    body = "".join(rng.choice(["a", "b ", "</", "ans", "日", "本", "🙂", "\n", "User", ":", "é", "<"])
                   for _ in range(40))
    stop = rng.choice(stops)
    text = body + stop + " trailing" if seed % 3 else body  # some texts have no stop at all
    ids = as_bytes(text, byte_ids) if seed % 2 else tok.encode(text, allow_special=False)
    chunks, i = [], 0
    while i < len(ids):
        n = rng.randint(1, 4)
        chunks.append(ids[i:i + n])
        i += n
    out = TextOutput(tok, stops)
    pieces, tail = stream(out, chunks)
    cut = min((text.find(s) for s in stops if s in text), default=len(text))
    assert shown(pieces, tail) == text[:cut]
    assert out.stopped == (cut < len(text))
    # Nothing shown is ever a prefix of a stop that later completed: the running text never passes the cut.
    running = ""
    for p in pieces:
        running += p.text
        assert text.startswith(running) and len(running) <= cut
