"""The token engine (`Engine`: paged KV, continuous batching of sequences) as a StepCore, for EngineLoop."""
from __future__ import annotations

from runtime.engine.engine import Engine, TokenEvent
from runtime.engine.sequence import Sequence
from runtime.engine.step_core import Abort, Add, CoreLoad, Output, StepCore, StepResult


class TokenCore(StepCore):
    """Requests are `Sequence`s keyed by their seq_id; each output is a `TokenEvent`, the one with a finish reason
    final. Its step is `Engine.step`."""

    thread_name = "engine"

    def __init__(self, engine: Engine, stage: str = "thinker") -> None:
        self.engine = engine
        self.stage = stage
        self._live: set[int] = set()  # seq_ids added and not yet finished or aborted, for fail_all

    def apply(self, command: object) -> None:
        if isinstance(command, Add):
            seq: Sequence = command.request
            assert seq.seq_id == command.key, "a sequence's key is its seq_id: the engine's events name that"
            self._live.add(seq.seq_id)
            self.engine.add(seq)
        elif isinstance(command, Abort):
            self._live.discard(command.key)
            self.engine.abort(command.key)
        else:
            raise TypeError(f"the token engine takes Add and Abort, not {command!r}")

    @property
    def has_work(self) -> bool:
        return self.engine.has_work

    def step_due_in(self) -> float:
        return self.engine.step_due_in()

    def step(self) -> StepResult:
        events, stats = self.engine.step()
        return StepResult([self._output(ev) for ev in events], stats)

    def _output(self, ev: TokenEvent) -> Output:
        final = ev.finish_reason is not None
        if final:
            self._live.discard(ev.seq.seq_id)
        return Output(ev.seq.seq_id, ev, final)

    def fail_all(self, error: BaseException) -> list[Output]:
        """Aborts every sequence, which frees its KV blocks (host bookkeeping only: no device work)."""
        for seq_id in self._live:
            self.engine.abort(seq_id)
        self._live.clear()
        return []

    def load(self) -> CoreLoad:
        sched = self.engine.scheduler
        slots = sched.slots
        state = None if slots is None else 1.0 - slots.num_free / slots.num_slots
        return CoreLoad(len(sched.waiting), len(sched.running), sched.blocks.usage_ratio, state)
