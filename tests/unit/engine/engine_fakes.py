"""Engine test helpers: sequences in one line, and a deterministic fake ModelRunner over a fake KV cache."""
from __future__ import annotations

import itertools

import torch

from runtime.engine.block_manager import BlockManager
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.engine import PendingTokens
from runtime.engine.scheduler import PENDING_TOKEN, ScheduledBatch
from runtime.engine.sequence import Sequence

GREEDY = SamplingOptions(temperature=0.0)
_ids = itertools.count(1000)


def make_seq(prompt: list[int] | int, sampling: SamplingOptions = GREEDY, seq_id: int | None = None,
             eos: frozenset[int] = frozenset()) -> Sequence:
    """A sequence with `prompt` ids (an int n means ids 1..n)."""
    ids = list(range(1, prompt + 1)) if isinstance(prompt, int) else prompt
    sid = next(_ids) if seq_id is None else seq_id
    return Sequence(sid, f"req-{sid}", ids, sampling, eos)


def next_token(history: list[int], vocab: int) -> int:
    """The fake model's favourite next token: a fixed function of every token so far."""
    h = 7
    for i, t in enumerate(history):
        h = (h * 31 + t * (i + 3)) % 1_000_003
    return h % vocab


class FakeRunner:
    """Runs a batch like a real paged model would, minus the maths.

    It writes each computed token into a fake KV cache at the slot the block manager gives, then reads the whole
    history back through the block table to make its logits: a block handed to two sequences with different
    content, a slot off by one, a prefix-cache hit on the wrong block, or a preempted sequence that does not
    recompute would change the tokens it picks (or trip an assert here).
    """

    def __init__(self, blocks: BlockManager, vocab: int = 50, device: str = "cpu", run_ahead: bool = True) -> None:
        self.reads_pending_tokens = run_ahead  # the engine then launches a step before reading the last one's tokens
        self.pending_reads = 0  # PENDING_TOKEN ids read from the last step's draws
        self.blocks = blocks
        self.vocab = vocab
        self.device = torch.device(device)
        self.kv: dict[int, tuple[int, int]] = {}  # slot -> (position, token) whose KV it holds
        self.batches: list[list[tuple[int, int, int]]] = []  # per step: (seq_id, start, num_tokens)
        self.released: list[int] = []

    def run(self, batch: ScheduledBatch, pending: PendingTokens | None = None) -> torch.Tensor:
        self.batches.append([(r.seq.seq_id, r.seq.num_computed_tokens, r.num_tokens) for r in batch.rows])
        rows = []
        for r in batch.rows:
            seq = r.seq
            start = seq.num_computed_tokens
            assert len(seq.block_table) * self.blocks.block_size >= start + r.num_tokens, "too few blocks"
            for pos in range(start, start + r.num_tokens):
                slot = self.blocks.slot(seq, pos)
                token = seq.token_id(pos)
                if token == PENDING_TOKEN:  # what the GPU would read on the device: the last step's draw
                    assert pending is not None and pos == seq.num_tokens - 1, "a pending token the runner cannot read"
                    token = int(pending.tokens[pending.index[seq.seq_id]])
                    self.pending_reads += 1
                entry = (pos, token)
                if self.blocks._refs[slot // self.blocks.block_size] > 1:  # a shared block is read-only
                    assert self.kv.get(slot) == entry, f"seq {seq.seq_id} overwrites shared slot {slot}"
                self.kv[slot] = entry
            if r.samples:
                end = start + r.num_tokens
                history = []
                for pos in range(end):
                    p, tok = self.kv[self.blocks.slot(seq, pos)]
                    assert p == pos, f"slot of {seq.seq_id}@{pos} holds position {p}"
                    history.append(tok)
                rows.append(self.logits(history))
        if not rows:
            return torch.zeros(0, self.vocab)
        return torch.stack(rows)

    def logits(self, history: list[int]) -> torch.Tensor:
        """A peaked but not one-hot distribution, so sampled rows vary and greedy rows are unambiguous."""
        g = torch.Generator().manual_seed(next_token(history, 1 << 30))
        out = torch.randn(self.vocab, generator=g)
        out[next_token(history, self.vocab)] += 4.0
        return out

    def release(self, seq: Sequence) -> None:
        self.released.append(seq.seq_id)
