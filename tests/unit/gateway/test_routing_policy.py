"""Thinker routing policies: longest cached prefix within the load margin, least load, round robin."""
from __future__ import annotations

from gateway.routing.policy import Candidate, Choice, RoundRobin, least_load, prefix_aware


def test_longest_prefix_wins_while_within_the_margin() -> None:
    cands = [Candidate("a", 3, 0), Candidate("b", 5, 4), Candidate("c", 2, 1)]
    assert prefix_aware(cands, margin=4) == Choice("b", "prefix", 4)  # 5 + 1 <= 2 + 4


def test_the_load_guard_moves_a_request_off_a_replica_past_the_margin() -> None:
    cands = [Candidate("a", 7, 4), Candidate("b", 2, 1), Candidate("c", 3, 0)]
    assert prefix_aware(cands, margin=5) == Choice("b", "load_guard", 1)  # a would hold 8 > 2 + 5
    assert prefix_aware(cands, margin=6) == Choice("a", "prefix", 4)
    assert prefix_aware(cands, margin=0) == Choice("b", "load_guard", 1)  # margin 0: the least loaded only


def test_no_prefix_anywhere_is_least_load_and_ties_go_to_the_lighter_replica() -> None:
    assert prefix_aware([Candidate("a", 3, 0), Candidate("b", 1, 0)], 8) == Choice("b", "least_load", 0)
    assert prefix_aware([Candidate("a", 3, 2), Candidate("b", 1, 2)], 8) == Choice("b", "prefix", 2)


def test_a_burst_on_one_prefix_never_puts_more_than_the_margin_on_one_replica() -> None:
    loads = {"a": 0, "b": 0}
    cached = {"a": 6, "b": 0}  # only a holds the shared prefix, and nothing finishes during the burst
    for _ in range(40):
        choice = prefix_aware([Candidate(n, loads[n], cached[n]) for n in loads], margin=3)
        loads[choice.name] += 1
        assert abs(loads["a"] - loads["b"]) <= 3
    assert loads == {"a": 21, "b": 19}  # a keeps as much as the margin allows: its cache saves b the prefill


def test_least_load_and_round_robin() -> None:
    cands = [Candidate("b", 1, 9), Candidate("a", 0, 0)]
    assert least_load(cands) == Choice("a", "least_load", 0)
    rr = RoundRobin()
    assert [rr(cands).name for _ in range(4)] == ["a", "b", "a", "b"]  # by name, whatever the load or cache
    assert rr([Candidate("c", 0, 0)]).name == "c"
