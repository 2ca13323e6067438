"""What rank 0 tells its workers over their pipes: small picklable records. Tensors never travel here: they follow
through the process group's broadcast (NCCL on GPUs), in the order the forward exchanges them."""
from __future__ import annotations

from dataclasses import dataclass

from services.thinker.graphs import GraphSettings


@dataclass(frozen=True)
class Prepare:
    """Allocate the rank's KV cache shard and, when `graphs` is set, capture the same graphs as rank 0 (in the same
    order, so the collectives inside the warm-ups and captures pair up)."""

    num_blocks: int  # the scheduler's blocks
    block_size: int
    graphs: GraphSettings | None  # with graphs, one more (scratch) block is allocated, as on rank 0
    num_state_slots: int = 0  # a hybrid model's state slots and snapshots (with graphs, one more scratch slot)


@dataclass(frozen=True)
class StateStep:
    """A hybrid model's step: which rows decode (their packed rows and slots follow through the broadcast) and the
    prefill rows' (first packed token, token count, slot), from which a worker plans its conv as rank 0 did."""

    num_decode: int
    prefill: list[tuple[int, int, int]]


@dataclass(frozen=True)
class EagerStep:
    """One eager forward: the shapes of the tensors rank 0 broadcasts next, and the host lengths the CPU
    attention path reads."""

    num_tokens: int
    block_size: int
    max_blocks: int  # width of the padded block table
    q_lens: list[int]
    kv_lens: list[int]
    deepstack_rows: int  # 0: no deepstack input
    deepstack_levels: int
    states: StateStep | None = None  # a hybrid model's state slots


@dataclass(frozen=True)
class StateReset:
    """Zero these state slots (sequences starting): their ids follow through the broadcast, `count` of them."""

    count: int


@dataclass(frozen=True)
class StateCopy:
    """Copy the states of slots `src` into slots `dst` (prefix-cache snapshots taken and restored)."""

    src: list[int]
    dst: list[int]


@dataclass(frozen=True)
class GraphStep:
    """Replay the graph of this kind and size: rank 0's graph broadcasts its static inputs into the worker's."""

    kind: str
    size: int


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class Failed:
    """A worker's setup raised: the message and traceback, for rank 0's error."""

    error: str
