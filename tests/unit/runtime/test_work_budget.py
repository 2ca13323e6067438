"""WorkBudget: admits work up to its limit, refuses past it naming the config key, always admits a request alone,
and gives back what a request held however it ends."""
from __future__ import annotations

import pytest

from runtime.errors import ResourceExhausted
from runtime.work_budget import WorkBudget


def budget() -> WorkBudget:
    return WorkBudget("vision", "patches", 100, "vision.encoder.max_pending_size")


def test_work_is_admitted_up_to_the_limit_and_refused_past_it() -> None:
    b = budget()
    with b.hold(60), b.hold(40):
        assert b.held == 100
        with pytest.raises(ResourceExhausted, match=r"holds 100 patches .* brings 1, over its limit "
                                                     r"vision.encoder.max_pending_size=100; retry shortly"):
            with b.hold(1):
                pass
    assert b.held == 0


def test_a_request_alone_is_admitted_whatever_its_size() -> None:
    b = budget()
    with b.hold(250):
        assert b.held == 250
    assert b.held == 0


def test_a_request_that_fails_gives_back_what_it_held() -> None:
    b = budget()
    with pytest.raises(RuntimeError), b.hold(70):
        raise RuntimeError("the encoder failed")
    with b.hold(100):
        assert b.held == 100
