"""The thinker's runner on rank 0 of a tensor-parallel group: ThinkerRunner over the rank's shard (KV cache of its
KV heads; a hybrid model's state slots holding its heads' share), which first has the workers allocate theirs and
capture the same graphs, and tells them each replay. Scheduling, packing, sampling rows and logits stay
ThinkerRunner's, run once here."""
from __future__ import annotations

from dataclasses import replace

import torch

from services.thinker.graphs import GraphSettings, StepGraph
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.parallel.messages import GraphStep, Prepare
from services.thinker.parallel.rank_model import ShardedLM
from services.thinker.runner import ThinkerRunner


class ParallelRunner(ThinkerRunner):
    def __init__(self, model: ShardedLM, num_blocks: int, block_size: int, device: torch.device,
                 dtype: torch.dtype, graphs: GraphSettings | None = None, num_state_slots: int = 0,
                 num_state_snapshots: int = 0) -> None:
        assert model.driver is not None, "rank 0's model drives the workers"
        self.driver = model.driver
        use_graphs = graphs is not None and model.use_kernels
        if use_graphs and isinstance(model, HybridLM):  # as ThinkerRunner: a hybrid model captures decode graphs only
            graphs = replace(graphs, prefill_buckets=())
        self.driver.send(Prepare(num_blocks, block_size, graphs if use_graphs else None,
                                 num_state_slots + num_state_snapshots if isinstance(model, HybridLM) else 0))
        with model.quiet():  # every rank warms up and captures its own graphs, the collectives in step
            super().__init__(model, num_blocks, block_size, device, dtype, graphs, num_state_slots,
                             num_state_snapshots)

    def _before_replay(self, graph: StepGraph) -> None:
        """A captured graph replays without running Python, so the workers are told which one; an uncaptured one
        (off CUDA) runs the forward, which announces itself as an eager step."""
        if graph.graph is not None:
            self.driver.send(GraphStep(graph.kind, graph.num_tokens))
