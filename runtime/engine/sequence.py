"""One request's state inside the engine (pure Python)."""
from __future__ import annotations

import enum
import time
from typing import Any

from runtime.engine.sampling_params import SamplingOptions


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"


class Sequence:
    """Token ids so far and how many of them have their KV in the cache.

    A step computes `all_ids[num_computed_tokens : num_computed_tokens + n]`; when that reaches the last token the
    step also samples the next one. Prefill, chunked prefill, decode and recompute after preemption are all this rule.
    """

    def __init__(self, seq_id: int, request_id: str, prompt_ids: list[int], sampling: SamplingOptions,
                 eos_token_ids: frozenset[int] = frozenset(), payload: Any = None,
                 media_salts: tuple[tuple[int, int, str], ...] = (), allow_prefix_cache: bool = True) -> None:
        if not prompt_ids:
            raise ValueError("a sequence needs at least one prompt token")
        self.seq_id = seq_id
        self.request_id = request_id
        self.prompt_ids = list(prompt_ids)
        self.output_ids: list[int] = []
        self.sampling = sampling
        self.eos_token_ids = eos_token_ids
        self.payload = payload  # model-specific inputs (media embeddings, positions); the engine never reads it
        self.num_computed_tokens = 0
        self.block_table: list[int] = []
        self.block_keys: list[bytes] = []  # prefix-cache keys of the full blocks of block_table, in order
        self.state_slot: int | None = None  # hybrid models: the slot of its linear-attention state while running
        self.media_salts = media_salts  # (start, end, content hash) of media spans: same ids, other pixels, other KV
        self.allow_prefix_cache = allow_prefix_cache
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.arrival_time = time.monotonic()
        self.first_scheduled_time: float | None = None
        self.num_cached_prompt_tokens = 0
        self.num_preemptions = 0

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def token_id(self, index: int) -> int:
        n = len(self.prompt_ids)
        return self.prompt_ids[index] if index < n else self.output_ids[index - n]

    def token_ids(self, start: int, stop: int) -> list[int]:
        n = len(self.prompt_ids)
        if stop <= n:
            return self.prompt_ids[start:stop]
        return (self.prompt_ids + self.output_ids)[start:stop]

    def __repr__(self) -> str:
        return (f"Sequence({self.seq_id}, {self.status.value}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})")
