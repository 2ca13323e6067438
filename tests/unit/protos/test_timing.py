"""omnimesh/timing.py: the gateway's timing trailer, written, read back, and summarised over calls."""
from __future__ import annotations

import pytest

from omnimesh.timing import (TIMING_TRAILER, first_token_ms, format_timing, parse_timing, timing_percentiles,
                             trailer_timing)


def test_written_timing_reads_back_in_order() -> None:
    text = format_timing([("admit", 0.123), ("audio.queue", 4.0), ("total", 90.456)])
    assert text == "admit;dur=0.12, audio.queue;dur=4.00, total;dur=90.46"
    assert parse_timing(text) == {"admit": 0.12, "audio.queue": 4.0, "total": 90.46}
    assert list(parse_timing(text)) == ["admit", "audio.queue", "total"]


def test_a_call_without_the_trailer_has_no_timing() -> None:
    assert trailer_timing(None) == {} and trailer_timing([("other", "x")]) == {}
    assert trailer_timing([(TIMING_TRAILER, "total;dur=1.50")]) == {"total": 1.5}


def test_percentiles_take_each_name_over_the_calls_that_have_it() -> None:
    got = timing_percentiles([{"encode": 1.0, "total": 10.0}, None, {"total": 30.0}, {}])
    assert list(got) == ["encode", "total"] and got["encode"] == {"p50": 1.0, "p99": 1.0}
    assert got["total"]["p50"] == 20.0 and got["total"]["p99"] == pytest.approx(29.8)
    assert timing_percentiles([]) == {}


def test_the_first_token_is_the_phases_up_to_it() -> None:
    timing = {"admit": 1.0, "encode": 2.0, "first_token": 3.0, "rest": 10.0, "thinker.queue": 0.5, "total": 16.0}
    assert first_token_ms(timing) == 6.0
    assert first_token_ms({"admit": 1.0, "total": 1.0}) is None  # a call that never reached its first token
