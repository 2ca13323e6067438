"""Graph steps on CPU: the same static buffers, padding and scratch block as on CUDA, run eagerly (no capture)."""
from __future__ import annotations

import math

import pytest
import torch

from runtime.engine.block_manager import BlockManager
from runtime.engine.engine import Engine
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.scheduler import ScheduledBatch, Scheduler, SchedulerLimits
from runtime.engine.sequence import Sequence
from services.thinker.graphs import GraphSettings, StepGraphs
from services.thinker.model import ThinkerConfig, ThinkerLM
from services.thinker.request import MediaInput, ThinkerRequest
from services.thinker.runner import ThinkerRunner
from tests.unit.thinker_model.thinker_tiny_config import tiny_config

NUM_BLOCKS, BLOCK = 48, 4
SETTINGS = GraphSettings(decode_buckets=(1, 2, 4), prefill_buckets=(8, 16), max_num_seqs=4, max_model_len=96)


def tiny_model(use_kernels: bool) -> ThinkerLM:
    cfg = tiny_config()
    torch.manual_seed(0)
    state = {k: v.normal_(0.0, 0.3) for k, v in ThinkerLM(cfg).state_dict().items()}
    return ThinkerLM.from_state_dict(cfg, state, use_kernels=use_kernels)


class TableLog:
    """Wraps a runner to note every block a scheduled sequence held."""

    def __init__(self, runner: ThinkerRunner) -> None:
        self.inner, self.device, self.blocks = runner, runner.device, set()

    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        for row in batch.rows:
            self.blocks.update(row.seq.block_table)
        return self.inner.run(batch)

    def release(self, seq: Sequence) -> None:
        self.inner.release(seq)


def audio_spans(i: int, n: int, hidden: int) -> list[MediaInput]:
    """Prompt i's audio item: rows 1..n-2 of an n-token prompt (n >= 4), embeddings seeded by i."""
    if n < 4:
        return []
    rows = torch.randn(n - 3, hidden, generator=torch.Generator().manual_seed(i))
    return [MediaInput("audio", 1, n - 3, (), 0.0, f"clip{i}", rows)]


def generate(runner: ThinkerRunner, cfg: ThinkerConfig,
             media: bool = False) -> tuple[list[list[int]], list[float], set[int]]:
    logged = TableLog(runner)
    engine = Engine(Scheduler(SchedulerLimits(4, 16, 96), BlockManager(NUM_BLOCKS, BLOCK, True)), logged)
    seqs = []
    for i, n in enumerate([5, 11, 3, 14, 7, 2]):
        prompt = [(7 * i + 3 * j) % 190 + 1 for j in range(n)]
        spans = audio_spans(i, n, cfg.hidden_size) if media else []
        req = ThinkerRequest(torch.arange(n).expand(3, -1).contiguous(), 0, spans)
        opts = SamplingOptions(temperature=0.0, max_tokens=5 + i % 3, ignore_eos=True, logprobs=True)
        seqs.append(Sequence(i, f"r{i}", prompt, opts, frozenset(), req))
        engine.add(seqs[-1])
    logprobs = []
    while engine.has_work:
        events, _ = engine.step()
        logprobs += [e.logprob for e in events]
    return [s.output_ids for s in seqs], logprobs, logged.blocks


def test_graph_steps_equal_eager_and_never_write_foreign_kv() -> None:
    cfg = tiny_config()
    want_ids, want_lps, _ = generate(ThinkerRunner(tiny_model(False), NUM_BLOCKS, BLOCK, torch.device("cpu"),
                                                   torch.float32), cfg)
    runner = ThinkerRunner(tiny_model(True), NUM_BLOCKS, BLOCK, torch.device("cpu"), torch.float32, SETTINGS)
    assert runner.graphs is not None and runner.kv_caches[0].shape[1] == NUM_BLOCKS + 1  # + the scratch block
    for kv in runner.kv_caches:
        kv.fill_(math.nan)  # a padding row that read or wrote outside its scratch block would show up
    got_ids, got_lps, used = generate(runner, cfg)
    assert got_ids == want_ids
    torch.testing.assert_close(torch.tensor(got_lps), torch.tensor(want_lps), rtol=1e-5, atol=1e-5)
    kinds = {key.split(":")[0] for key in runner.graphs.replays}
    assert kinds == {"decode", "prefill"}  # both graph kinds ran; 14-token prompts chunk into mixed steps
    untouched = [b for b in range(NUM_BLOCKS) if b not in used]
    assert untouched and all(torch.isnan(kv[:, untouched]).all() for kv in runner.kv_caches)


def test_media_rows_replay_on_prefill_graphs_equal_eager() -> None:
    """Audio rows (no deepstack) in prefill and mixed steps replay on the prefill graphs, their embeddings taken
    from the media buffer where the mask says so, with the eager runner's tokens and logprobs."""
    cfg = tiny_config()
    want_ids, want_lps, _ = generate(ThinkerRunner(tiny_model(False), NUM_BLOCKS, BLOCK, torch.device("cpu"),
                                                   torch.float32), cfg, media=True)
    text_ids, _, _ = generate(ThinkerRunner(tiny_model(False), NUM_BLOCKS, BLOCK, torch.device("cpu"),
                                            torch.float32), cfg)
    assert want_ids != text_ids  # the audio rows change the answer: a graph that dropped them would show
    runner = ThinkerRunner(tiny_model(True), NUM_BLOCKS, BLOCK, torch.device("cpu"), torch.float32, SETTINGS)
    got_ids, got_lps, _ = generate(runner, cfg, media=True)
    assert got_ids == want_ids
    torch.testing.assert_close(torch.tensor(got_lps), torch.tensor(want_lps), rtol=1e-5, atol=1e-5)
    assert runner.eager_steps == 0 and runner.graphs.replays.get("prefill:16", 0) > 0


def test_media_steps_plan_onto_prefill_graphs_only() -> None:
    graphs = StepGraphs(lambda ids, pos, ctx, media: torch.zeros(ids.shape[0], 4), SETTINGS, BLOCK, NUM_BLOCKS,
                        torch.device("cpu"), capture=False, media_width=4)
    table = [[0]]
    assert graphs.plan([1, 1], table * 2, media=True).kind == "prefill"  # one-token media rows: not a decode graph
    assert graphs.plan([1, 1], table * 2).kind == "decode"
    without = StepGraphs(lambda ids, pos, ctx, media: torch.zeros(ids.shape[0], 4), SETTINGS, BLOCK, NUM_BLOCKS,
                         torch.device("cpu"), capture=False)
    assert without.plan([3], table, media=True) is None and without.prefill[8].media is None


def test_media_mask_marks_only_this_steps_rows() -> None:
    """The mask is rewritten whole every step: rows a previous step marked read their token embeddings again."""
    graphs = StepGraphs(lambda ids, pos, ctx, media: torch.zeros(ids.shape[0], 4), SETTINGS, BLOCK, NUM_BLOCKS,
                        torch.device("cpu"), capture=False, media_width=4)
    g = graphs.plan([6], [[0, 1]], media=True)
    graphs.prepare(g, [3] * 6, torch.zeros(3, 6, dtype=torch.long), [6], [6], [[0, 1]], [1, 2, 3],
                   torch.ones(3, 4))
    assert g.media.mask.tolist() == [0, 1, 1, 1, 0, 0, 0, 0]
    x = torch.zeros(8, 4)
    assert g.media.apply(x).sum(dim=1).tolist() == [0, 4, 4, 4, 0, 0, 0, 0]
    graphs.prepare(g, [3] * 5, torch.zeros(3, 5, dtype=torch.long), [5], [5], [[0, 1]])
    assert g.media.mask.tolist() == [0] * 8 and torch.equal(g.media.apply(x), x)


def test_plan_picks_the_smallest_graph_that_holds_the_step() -> None:
    graphs = StepGraphs(lambda ids, pos, ctx, media: torch.zeros(ids.shape[0], 4), SETTINGS, BLOCK, NUM_BLOCKS,
                        torch.device("cpu"), capture=False)
    table = [[0]]
    assert (graphs.plan([1, 1, 1], table * 3).kind, graphs.plan([1, 1, 1], table * 3).num_tokens) == ("decode", 4)
    assert graphs.plan([1], table).num_tokens == 1
    mixed = graphs.plan([1, 1, 6], table * 3)
    assert (mixed.kind, mixed.num_tokens, mixed.num_seqs) == ("prefill", 8, 5)
    assert graphs.plan([9, 1], table * 2).num_tokens == 16
    assert graphs.plan([17], table) is None  # more tokens than the top rung: eager
    assert graphs.plan([1], [[0] * (graphs.width + 1)]) is None  # a table wider than the static one: eager


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_padding_rows_point_at_the_scratch_block(kind: str) -> None:
    graphs = StepGraphs(lambda ids, pos, ctx, media: torch.zeros(ids.shape[0], 4), SETTINGS, BLOCK, NUM_BLOCKS,
                        torch.device("cpu"), capture=False)
    decode = ([1, 1, 1], [6, 3, 1], [[5, 9], [2], [6]])
    q_lens, kv_lens, tables = decode if kind == "decode" else ([3, 1], [3, 6], [[4], [7, 8]])
    g = graphs.plan(q_lens, tables)
    graphs.prepare(g, [11] * sum(q_lens), torch.zeros(3, sum(q_lens), dtype=torch.long), q_lens, kv_lens, tables)
    ctx, scratch = g.ctx, NUM_BLOCKS * BLOCK
    real = sum(q_lens)
    expected_real = [9 * BLOCK + 1, 2 * BLOCK + 2, 6 * BLOCK] if kind == "decode" else [16, 17, 18, 8 * BLOCK + 1]
    assert ctx.slot_mapping[:real].tolist() == expected_real
    pad = ctx.slot_mapping[real:]
    assert ((pad >= scratch) & (pad < scratch + BLOCK)).all()
    assert ctx.cu_seqlens_q[-1] == g.num_tokens  # every row belongs to some sequence, so every output is written
    if kind == "decode":
        assert g.num_tokens == 4 and ctx.kv_lens[3:].tolist() == [1] and ctx.block_tables[3, 0] == NUM_BLOCKS
    else:
        assert ctx.kv_lens[2] == g.num_tokens - real and ctx.kv_lens[3:].tolist() == [0, 0]
