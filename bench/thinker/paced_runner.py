"""A ModelRunner that stands in for the GPU: each step packs per-row positions as the thinker's runner does (small
torch calls, each of which gives up the GIL), then sleeps a fixed time with the GIL released, like a CUDA sync, and
returns logits that pick a fixed cycle of ordinary tokens. No KV, no maths: what is left is the engine's own host
work and everything downstream of it (streams, detokenisation, gRPC) competing with it for the GIL."""
from __future__ import annotations

import time

import torch

from runtime.engine.scheduler import ScheduledBatch
from runtime.engine.sequence import Sequence

# " The cat and the dog went to the park on a day when it was not very hot, so they had a good time." in the Qwen
# vocabulary, less " cat" (8251): real text to detokenise, every id below LOGIT_WIDTH.
CYCLE = (576, 323, 279, 5562, 3937, 311, 279, 6118, 389, 264, 1899, 979, 432, 572, 537, 1602, 4017, 11, 773, 807,
         1030, 264, 1661, 882, 13)
LOGIT_WIDTH = 8_192  # a real vocabulary's sort costs a CPU ~4 ms a step at 32 rows, which is not what we measure


class PacedRunner:
    """`step_s` of GIL-free waiting per step; the token of a row is CYCLE[its output length % len(CYCLE)]."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.device = torch.device("cpu")

    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        rows = [r.seq for r in batch.rows if r.samples]
        positions = [(torch.arange(r.seq.num_computed_tokens, r.seq.num_computed_tokens + r.num_tokens) + 1)
                     .unsqueeze(0).expand(3, -1) for r in batch.rows]  # services/thinker/runner.py's _positions
        torch.cat(positions, dim=1)  # [3, T]
        time.sleep(self.step_s)  # the device's time; time.sleep releases the GIL as a CUDA sync does
        logits = torch.zeros(len(rows), LOGIT_WIDTH)
        picks = torch.tensor([CYCLE[len(s.output_ids) % len(CYCLE)] for s in rows], dtype=torch.long)
        logits[torch.arange(len(rows)), picks] = 1.0
        return logits  # [rows that sample, LOGIT_WIDTH]

    def release(self, seq: Sequence) -> None:
        pass
