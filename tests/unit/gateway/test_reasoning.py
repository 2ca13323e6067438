"""gateway/reasoning.py: a Thinking model's `<think>` block becomes reasoning chunks and the rest the answer, cut at the
`</think>` token whichever chunk it falls in; a deployment whose template has no `</think>` is left alone."""
from __future__ import annotations

from pathlib import Path

from omnimesh.v1 import common_pb2
from runtime.chat_template import load_chat_template
from runtime.checkpoint.chat_template_text import CHAT_TEMPLATE, THINKING_CHAT_TEMPLATE
from runtime.tokenizer import Tokenizer
from gateway.clients.thinker import TextChunk
from gateway.reasoning import ReasoningChunk, ReasoningMarkers, ReasoningSplit

IM_START, USER, ASSISTANT, NL = 151644, 872, 77091, 198
OPEN, CLOSE = 151667, 151668
A, B, C, D = 64, 65, 66, 67


def markers(demo_ckpt: Path) -> ReasoningMarkers:
    found = ReasoningMarkers.of(Tokenizer.from_dir(demo_ckpt), THINKING_CHAT_TEMPLATE)
    assert found is not None and (found.open_id, found.close_id) == (OPEN, CLOSE)
    return found


def lp(token_id: int) -> common_pb2.TokenLogprob:
    return common_pb2.TokenLogprob(token_id=token_id, logprob=-1.0)


def kinds(pieces: list) -> list[tuple[str, str, list[int]]]:
    return [("reasoning" if isinstance(p, ReasoningChunk) else "text", p.text, p.token_ids) for p in pieces]


PROMPT_OPEN = [IM_START, USER, NL, A, 151645, NL, IM_START, ASSISTANT, NL, OPEN, NL]
PROMPT_CLOSED = [IM_START, USER, NL, A, 151645, NL, IM_START, ASSISTANT, NL]


def test_a_prompt_that_opens_the_block_reasons_until_the_close_token_cuts_its_chunk(demo_ckpt: Path) -> None:
    split = ReasoningSplit(markers(demo_ckpt), PROMPT_OPEN)
    assert kinds(split.feed(TextChunk([A, B], "ab", []))) == [("reasoning", "ab", [A, B])]
    cut = split.feed(TextChunk([C, CLOSE, NL, D], "c</think>\n\nd", [lp(C), lp(CLOSE), lp(NL), lp(D)]))
    assert kinds(cut) == [("reasoning", "c", [C, CLOSE]), ("text", "d", [NL, D])]
    assert [x.token_id for x in cut[0].logprobs] == [C, CLOSE] and [x.token_id for x in cut[1].logprobs] == [NL, D]
    assert kinds(split.feed(TextChunk([NL, A], "\na", []))) == [("text", "\na", [NL, A])]  # the answer's own newlines


def test_the_close_token_alone_then_newlines_then_the_answer(demo_ckpt: Path) -> None:
    split = ReasoningSplit(markers(demo_ckpt), PROMPT_OPEN)
    assert kinds(split.feed(TextChunk([CLOSE], "</think>", []))) == [("reasoning", "", [CLOSE])]
    assert kinds(split.feed(TextChunk([NL], "\n\n", []))) == [("text", "", [NL])]
    assert kinds(split.feed(TextChunk([A], "a", []))) == [("text", "a", [A])]


def test_a_model_that_opens_the_block_itself(demo_ckpt: Path) -> None:
    split = ReasoningSplit(markers(demo_ckpt), PROMPT_CLOSED)
    assert kinds(split.feed(TextChunk([OPEN, NL, A], "<think>\na", []))) == [("reasoning", "a", [OPEN, NL, A])]
    assert kinds(split.feed(TextChunk([CLOSE, B], "</think>b", []))) == [("reasoning", "", [CLOSE]),
                                                                         ("text", "b", [B])]


def test_an_answer_without_thoughts_is_untouched(demo_ckpt: Path) -> None:
    split = ReasoningSplit(markers(demo_ckpt), PROMPT_CLOSED)
    assert kinds(split.feed(TextChunk([NL, A], "\na", []))) == [("text", "\na", [NL, A])]
    assert kinds(split.feed(TextChunk([OPEN], "<think>", []))) == [("text", "<think>", [OPEN])]  # not first: text


def test_a_closed_block_in_an_earlier_turn_leaves_the_prompt_closed(demo_ckpt: Path) -> None:
    m = markers(demo_ckpt)
    earlier = [IM_START, ASSISTANT, NL, OPEN, A, CLOSE, B, 151645, NL]
    assert not m.opened_by(earlier + PROMPT_CLOSED) and m.opened_by(earlier + PROMPT_OPEN)
    assert not m.opened_by(PROMPT_CLOSED[:-3] + [IM_START, ASSISTANT, NL, OPEN, A, CLOSE])  # closed in the turn


def test_templates_without_a_close_marker_do_not_reason(demo_ckpt: Path) -> None:
    assert ReasoningMarkers.of(Tokenizer.from_dir(demo_ckpt), CHAT_TEMPLATE) is None
    assert ReasoningMarkers.of(Tokenizer.from_dir(demo_ckpt), load_chat_template(demo_ckpt)) is None
