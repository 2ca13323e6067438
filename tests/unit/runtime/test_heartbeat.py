"""Heartbeat: an iteration is judged stuck only while it runs and only past the limit; 0 turns the check off."""
from __future__ import annotations

import time

from runtime.heartbeat import Heartbeat


def test_only_a_running_iteration_past_the_limit_is_stuck() -> None:
    hb = Heartbeat()
    assert hb.stuck(0.01) is None  # between iterations
    with hb.beat():
        assert hb.stuck(60) is None
        time.sleep(0.05)
        err = hb.stuck(0.01)
        assert isinstance(err, TimeoutError) and "over stall_timeout_s=0.01: the device may be hung" in str(err)
        assert hb.stuck(0) is None  # off
    assert hb.stuck(0.01) is None  # it ended


def test_an_iteration_that_raises_still_ends() -> None:
    hb = Heartbeat()
    try:
        with hb.beat():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    time.sleep(0.02)
    assert hb.stuck(0.01) is None
