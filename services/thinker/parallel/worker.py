"""A tensor-parallel worker process (ranks 1..N-1): loads its shard, joins the group, then runs every forward rank 0
announces on its own KV cache shard (and, for a hybrid model, its own share of the state slots) until told to stop,
or until rank 0 is gone."""
from __future__ import annotations

import logging
import os
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from runtime.attention import AttentionContext
from runtime.attention.kv_cache import allocate_kv_cache
from runtime.stage_device import stage_device
from services.thinker.graphs import MediaRows, StepGraphs
from services.thinker.hybrid_warmup import warm_hybrid_steps
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.linear_state import LinearStateCache, check_state_memory
from services.thinker.parallel.collectives import RankGroup, join_group, leave_group, worker_store
from services.thinker.parallel.messages import (
    EagerStep,
    Failed,
    GraphStep,
    Prepare,
    Ready,
    StateCopy,
    StateReset,
    Stop,
)
from services.thinker.parallel.mirrored_states import apply_reset
from services.thinker.parallel.plan import plan_rank
from services.thinker.parallel.rank_model import load_rank_model
from services.thinker.state_graphs import DecodeStateInputs

log = logging.getLogger(__name__)

PARENT_CHECK_S = 1.0  # how often an idle worker looks whether rank 0 still lives


@dataclass(frozen=True)
class WorkerSpec:
    ckpt_dir: Path
    rank: int
    world: int
    host: str
    port: int  # rank 0's TCP store
    device: str
    dtype: str  # a torch dtype's name
    cpu_threads: int
    timeout_s: float  # every collective's
    load_timeout_s: float  # the rendezvous store's: rank 0 joins once every rank has loaded its shard
    use_kernels: bool | None


class _Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.device = stage_device(spec.device, spec.cpu_threads)
        self.dtype = getattr(torch, spec.dtype)
        plan = plan_rank(ThinkerConfig.from_checkpoint(spec.ckpt_dir), spec.rank, spec.world)
        self.model = load_rank_model(spec.ckpt_dir, plan, RankGroup(spec.rank, spec.world), self.device, self.dtype,
                                     spec.use_kernels)
        self.kv_caches: list[torch.Tensor] = []
        self.states: LinearStateCache | None = None  # a hybrid model's share of every state slot
        self._decode_states: DecodeStateInputs | None = None  # its decode graphs' slots, which rank 0 broadcasts into
        self.graphs: StepGraphs | None = None
        self.x_static: torch.Tensor | None = None  # the graphs' input embeddings, which rank 0 broadcasts into

    @torch.inference_mode()
    def prepare(self, msg: Prepare) -> None:
        """What rank 0's ThinkerRunner allocates, captures and warms up, in the same order (the collectives pair)."""
        cfg = self.model.cfg
        use_graphs = msg.graphs is not None
        scratch = msg.num_state_slots  # a hybrid model's graph padding rows advance the slot after every real one
        if cfg.hybrid is not None:
            check_state_memory(cfg.hybrid, scratch + int(use_graphs), self.dtype, self.device)
            self.states = self.model.allocate_states(scratch + int(use_graphs), self.device)
            if use_graphs and msg.graphs.decode_buckets:
                self._decode_states = DecodeStateInputs(self.states, msg.graphs.decode_buckets, scratch, self.device)
        self.kv_caches = allocate_kv_cache(len(cfg.kv_layers), msg.num_blocks + int(use_graphs), msg.block_size,
                                           cfg.num_kv_heads, cfg.head_dim, self.dtype, self.device)
        on_cuda = self.device.type == "cuda"
        if use_graphs:
            rows = max((*msg.graphs.decode_buckets, *msg.graphs.prefill_buckets), default=0)
            self.x_static = torch.zeros(rows, cfg.hidden_size, dtype=self.dtype, device=self.device)
            self.graphs = StepGraphs(self._graph_forward, msg.graphs, msg.block_size, msg.num_blocks, self.device,
                                     capture=on_cuda)
            self.graphs.capture()  # in step with rank 0's: same shapes, same order, same warm-ups
        if self.model.use_kernels and on_cuda:  # no collectives: the rank's own heads' attention variants compiled
            from runtime.kernels.paged_attention_triton import compile_prefill_variants  # noqa: PLC0415 - triton

            compile_prefill_variants(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, msg.block_size, self.dtype,
                                     self.device)
        if self.states is not None and use_graphs and on_cuda:  # rank 0 compiles its eager hybrid steps here
            warm_hybrid_steps(self.model, self.states, self.kv_caches, msg.block_size, scratch_slot=scratch,
                              scratch_block=msg.num_blocks, device=self.device, logits=False,
                              max_batch_tokens=msg.graphs.max_batch_tokens)

    def _graph_forward(self, ids: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext,
                       media: MediaRows | None) -> torch.Tensor:
        """What each graph captures: its rows of the embeddings buffer (rank 0 broadcasts into it, media rows
        already in: `media` is None here), then the decoder (a hybrid model's on its decode graph's slots).
        -> [N, H], unused."""
        assert self.x_static is not None
        n = ids.shape[0]
        if self._decode_states is not None:
            states = self._decode_states.context(n)
            return self.model(self.x_static[:n], positions, ctx, self.kv_caches, states=states).hidden
        return self.model(self.x_static[:n], positions, ctx, self.kv_caches).hidden

    @torch.inference_mode()
    def eager(self, step: EagerStep) -> None:
        inputs = self.model.step_inputs(step, self.device, self.dtype, self.states)
        if inputs.states is not None:
            self.model(inputs.x, inputs.positions, inputs.ctx, self.kv_caches, states=inputs.states)
        else:
            self.model(inputs.x, inputs.positions, inputs.ctx, self.kv_caches, deepstack=inputs.deepstack)

    @torch.inference_mode()
    def replay(self, step: GraphStep) -> None:
        assert self.graphs is not None, "a graph step before graphs were captured"
        table = self.graphs.decode if step.kind == "decode" else self.graphs.prefill
        self.graphs.execute(table[step.size])

    @torch.inference_mode()
    def change_states(self, msg: StateReset | StateCopy) -> None:
        """Rank 0's change to its state slots (mirrored_states.py), made to this rank's share of them."""
        assert self.states is not None, "a state change before the state slots were allocated"
        if isinstance(msg, StateReset):
            apply_reset(self.states, msg, self.model.group, self.device)
        else:
            self.states.copy(msg.src, msg.dst)


def run_worker(spec: WorkerSpec, conn: Connection) -> None:
    """The process target. Setup errors go back to rank 0 as Failed; a step error ends the process, which makes
    rank 0's next collective (or its liveness check) fail rather than hang."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s tp-rank{spec.rank} %(levelname)s %(message)s")
    parent = os.getppid()
    try:
        worker = _Worker(spec)
        store = worker_store(spec.host, spec.port, spec.world, spec.load_timeout_s)
    except Exception:  # noqa: BLE001 - any setup failure is reported whole
        conn.send(Failed(traceback.format_exc()))
        raise SystemExit(1) from None
    conn.send(Ready())
    try:
        join_group(store, spec.rank, spec.world, worker.device, spec.timeout_s)
        while True:
            if not conn.poll(PARENT_CHECK_S):
                if os.getppid() != parent:
                    log.error("rank 0 (pid %d) is gone; exiting", parent)
                    raise SystemExit(1)
                continue
            msg = conn.recv()
            if isinstance(msg, EagerStep):
                worker.eager(msg)
            elif isinstance(msg, GraphStep):
                worker.replay(msg)
            elif isinstance(msg, (StateReset, StateCopy)):
                worker.change_states(msg)
            elif isinstance(msg, Prepare):
                worker.prepare(msg)
            elif isinstance(msg, Stop):
                break
            else:
                raise TypeError(f"tensor-parallel worker got {msg!r}")
    except EOFError:
        log.error("rank 0 closed the pipe; exiting")
        raise SystemExit(1) from None
    finally:
        leave_group()
