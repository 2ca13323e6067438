"""`WorkBudget`: how much work an encoder stage has accepted and not yet finished, and the refusal past a limit."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from runtime.errors import ResourceExhausted


class WorkBudget:
    """Work accepted and not finished (being received, queued or computed), in the stage's unit (patches, mel
    frames). A request is admitted on its `start` message, before any payload is read, so a burst larger than the
    stage can hold is refused with RESOURCE_EXHAUSTED (a RetryInfo the gateway passes on) instead of filling host
    memory with frames that would wait minutes. A request alone is always admitted: the per-request limit bounds it.
    One event loop serves a stage, so no lock is needed."""

    def __init__(self, stage: str, unit: str, limit: int, config_key: str) -> None:
        self.stage, self.unit, self.limit, self.config_key = stage, unit, limit, config_key
        self.held = 0

    @contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """Holds `size` for the body's duration (a request's reading, queueing, computing and streaming back)."""
        if self.held and self.held + size > self.limit:
            raise ResourceExhausted(f"the {self.stage} stage holds {self.held} {self.unit} of accepted work and this "
                                    f"request brings {size}, over its limit {self.config_key}={self.limit}; retry "
                                    f"shortly, or add {self.stage} replicas")
        self.held += size
        try:
            yield
        finally:
            self.held -= size
