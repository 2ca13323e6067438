"""Picks a thinker replica for one request from what is known of each: pure functions over candidates."""
from __future__ import annotations

import itertools
from typing import NamedTuple

# Why a replica was picked (the `decision` label of omnimesh_thinker_routed_total): prefix, for holding the longest
# cached prefix; load_guard, a replica holding a longer one was past the margin; least_load, nobody held any (or
# the policy is least_load); round_robin, its turn.
DECISIONS = ("prefix", "load_guard", "least_load", "round_robin")


class Candidate(NamedTuple):
    name: str
    load: int  # requests in flight on it (running + waiting)
    prefix_blocks: int  # leading blocks of this request's prompt it holds


class Choice(NamedTuple):
    name: str
    decision: str
    prefix_blocks: int


def prefix_aware(candidates: list[Candidate], margin: int) -> Choice:
    """The longest cached prefix among the replicas that stay within `margin` requests of the least-loaded one
    once given this request (the least loaded always qualify); ties go to the lighter load, then list order."""
    least = min(c.load for c in candidates)
    allowed = [c for c in candidates if c.load == least or c.load + 1 <= least + margin]
    best = max(allowed, key=lambda c: (c.prefix_blocks, -c.load))
    longest = max(c.prefix_blocks for c in candidates)
    if best.prefix_blocks < longest:
        decision = "load_guard"
    else:
        decision = "prefix" if longest > 0 else "least_load"
    return Choice(best.name, decision, best.prefix_blocks)


def least_load(candidates: list[Candidate]) -> Choice:
    best = min(candidates, key=lambda c: c.load)
    return Choice(best.name, "least_load", best.prefix_blocks)


class RoundRobin:
    """Each serving replica in turn (by name, so a replica that comes back takes its place)."""

    def __init__(self) -> None:
        self._turn = itertools.count()

    def __call__(self, candidates: list[Candidate]) -> Choice:
        ordered = sorted(candidates, key=lambda c: c.name)
        pick = ordered[next(self._turn) % len(ordered)]
        return Choice(pick.name, "round_robin", pick.prefix_blocks)
