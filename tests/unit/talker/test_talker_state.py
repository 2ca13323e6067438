"""TalkerState's text queue: thinker ids in, tts_eos once on end of turn, tts_pad after, never ahead of the thinker."""
from __future__ import annotations

import pytest

from services.talker.model.sampling import GREEDY
from services.talker.model.state import TalkerState

EOS, TTS_EOS, TTS_PAD = 99, 1000, 1001


def state() -> TalkerState:
    return TalkerState("r1", GREEDY, 10, frozenset({EOS}), TTS_EOS, TTS_PAD)


def test_end_of_turn_becomes_tts_eos_then_pads() -> None:
    s = state()
    for token in (5, 6, EOS, 7):
        s.push_text(token)
    assert [s.next_text() for _ in range(5)] == [5, 6, TTS_EOS, TTS_PAD, TTS_PAD]


def test_finish_without_eos_appends_tts_eos_once() -> None:
    s = state()
    s.push_text(5)
    s.finish_text()
    s.finish_text()
    assert [s.next_text() for _ in range(3)] == [5, TTS_EOS, TTS_PAD]


def test_readiness_waits_for_the_thinker() -> None:
    s = state()
    assert not s.is_ready
    with pytest.raises(RuntimeError, match="before its next thinker token"):
        s.next_text()
    s.push_text(3)
    assert s.is_ready
