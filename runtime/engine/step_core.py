"""The step-core contract: what a decoder stage's scheduling and model work must offer `EngineLoop`, which runs it.

A core is the single-threaded heart of one stage (the thinker's token engine, the talker's frame engine). It knows
nothing of threads, queues or event loops: `EngineLoop` calls every method below from its one engine thread
(except `load`, see there), in this order: `thread_started` once, then any number of rounds of `apply` (the
commands that arrived) and `step` (while `has_work`; `step_due_in` may defer it, with more `apply` calls meanwhile),
and `fail_all` once if any of them raised.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Add:
    """A new request; `key` names it in every later command and output (unique among live requests)."""

    key: int
    request: Any


@dataclass(frozen=True)
class Abort:
    """The request's reader is gone (cancelled, client left, its event loop closed): drop it and free its rows."""

    key: int


class Output(NamedTuple):
    """One item for request `key`'s stream. `final` ends the stream; an item that is an exception is always final
    (the reader raises it)."""

    key: int
    item: Any
    final: bool


@dataclass(frozen=True)
class StepStats:
    """What one step did, for the engine metrics and the slow-step log."""

    seconds: float
    num_rows: int  # rows the model ran (0: the step only moved other work, e.g. audio decodes)
    num_tokens: int
    num_preempted: int
    num_waiting: int
    num_running: int
    kv_usage_ratio: float | None  # None: the core keeps no block KV cache
    prefix_queried_tokens: int = 0  # looked up in the prefix cache during this step's admissions
    prefix_hit_tokens: int = 0


class StepResult(NamedTuple):
    outputs: list[Output]
    stats: StepStats | None  # None: nothing worth reporting as a step ran (see `StepCore.step`)


class CoreLoad(NamedTuple):
    num_waiting: int  # requests that hold no row yet
    num_running: int  # requests holding a row
    kv_usage_ratio: float | None  # None: no block KV cache, and the stage exposes no KV/token/prefix series
    state_usage_ratio: float | None = None  # None: no linear-attention state slots (not a hybrid model)


class StepCore(ABC):
    """One stage's scheduling and model work, driven a step at a time by `EngineLoop`.

    Keys: the loop hands the core each request with its key (`Add`) and routes the core's `Output`s by key. A key
    the core does not hold (finished, aborted, never added) may still arrive in a command: the core ignores it.
    """

    #: the engine thread's name (in /proc too: `top -H` shows which stage's thread is busy)
    thread_name: str = "engine"
    #: the stage the metrics and logs name
    stage: str = "engine"

    def thread_started(self) -> None:
        """Called once on the engine thread before any other method, e.g. to warm up per-thread library state
        or set the thread's CUDA stream and grad mode (both per thread). Raising here fails the loop's
        construction with that error as the cause, and the loop never runs."""

    @abstractmethod
    def apply(self, command: object) -> None:
        """Takes one command: `Add`, `Abort` or one of the core's own (e.g. more text for a request). Called
        between steps, in the order the commands were sent. Must not block on the device; an `Abort` must free
        the request's rows and cache before the next `step`, and must not produce outputs for it afterwards."""

    @property
    @abstractmethod
    def has_work(self) -> bool:
        """Whether `step` would do something now. False makes the loop sleep until the next command arrives, so it
        must be True while anything is owed to a live request that needs no new command to make progress (a
        launched step's results, a decode in flight)."""

    @abstractmethod
    def step(self) -> StepResult:
        """Runs one step and returns its outputs, in the order each stream must see them, and its stats. Only
        called while `has_work`. A request whose `final` output is returned is forgotten by the core. Stats are
        None for a step not worth reporting (nothing ran, or its time would be idle time). May raise: the loop
        then calls `fail_all` and stops."""

    def step_due_in(self) -> float:
        """Seconds the core would rather wait before its next `step`, while it `has_work`: the loop waits that long
        at most, applying the commands that arrive meanwhile (a step launched later can take requests that arrive
        while the device still runs the last one). 0, the default: step now."""
        return 0.0

    @abstractmethod
    def fail_all(self, error: BaseException) -> list[Output]:
        """After a method raised `error`: drops every request and frees what it can (the device may be gone, so
        this must not need it to work). Returns outputs already made but not yet returned (the failed step's); the
        loop sends them, then ends every stream still open with an error naming `error`."""

    @abstractmethod
    def load(self) -> CoreLoad:
        """Queue and batch sizes for the gauges. Called from a metrics scrape on another thread: reads counters
        only, and a value one step stale is fine."""
