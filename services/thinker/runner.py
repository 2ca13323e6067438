"""Turns a scheduled batch into one ThinkerLM forward: packed embeddings with media, M-RoPE positions, paged KV."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import torch

from runtime.attention import AttentionContext, build_attention_context
from runtime.attention.kv_cache import allocate_kv_cache
from runtime.engine.engine import PendingTokens
from runtime.engine.scheduler import PENDING_TOKEN, ScheduledBatch, ScheduledRow
from runtime.engine.sequence import Sequence
from runtime.transfer import to_device
from services.thinker.graphs import CaptureRecord, GraphSettings, MediaRows, StepGraph, StepGraphs
from services.thinker.hybrid_warmup import warm_hybrid_steps
from services.thinker.model import DeepstackInput, ThinkerLM
from services.thinker.model.hybrid_lm import HybridLM
from services.thinker.model.linear_state import (
    LinearStateCache,
    StateContext,
    build_state_context,
    check_state_memory,
)
from services.thinker.request import MediaInput, ThinkerRequest
from services.thinker.state_graphs import DecodeStateInputs

log = logging.getLogger(__name__)


@dataclass
class _Packed:
    token_ids: list[int]
    positions: list[torch.Tensor | range]  # per row: [3, n] prompt positions, or a range of generated ones
    media_rows: list[int]  # rows of x replaced by media embeddings
    media_values: list[torch.Tensor]  # one [n, H] slice per media span in this step, rows in media_rows' order
    visual_rows: list[int]  # rows that receive deepstack features
    visual_values: list[list[torch.Tensor]]  # per deepstack level, [n, H] slices in visual_rows' order
    capture: list[tuple[ThinkerRequest, int, int]]  # (request, prompt index, packed row) to keep for the talker
    pending_rows: list[int]  # packed rows whose token is still being drawn on the device (PENDING_TOKEN)
    pending_from: list[int]  # each one's row of PendingTokens.tokens

    def position_table(self) -> torch.Tensor:
        """[3, T] on the host: each run of generated rows' positions made one tensor, not five small ops a row (at
        20 decode rows that was a sixth of the thinker's engine thread, py-spy on an H100)."""
        pieces: list[torch.Tensor] = []
        run: list[int] = []
        for piece in self.positions:
            if isinstance(piece, range):
                run.extend(piece)
                continue
            if run:
                pieces.append(torch.tensor(run, dtype=torch.long).expand(3, -1))
                run = []
            pieces.append(piece)
        if run:
            pieces.append(torch.tensor(run, dtype=torch.long).expand(3, -1))
        # one piece is a view (an expanded run, a slice of the request's table): to_device's pinned copy needs it dense
        return pieces[0].contiguous() if len(pieces) == 1 else torch.cat(pieces, dim=1)


class ThinkerRunner:
    """The engine's ModelRunner for the thinker; owns the model, the paged KV cache and (Qwen3.5) the state slots'
    tensors. It reads pending tokens (the last step's draws, still on the device) into its token ids on the device,
    so the engine runs one step ahead."""

    reads_pending_tokens = True

    def __init__(self, model: ThinkerLM | HybridLM, num_blocks: int, block_size: int, device: torch.device,
                 dtype: torch.dtype, graphs: GraphSettings | None = None, num_state_slots: int = 0,
                 num_state_snapshots: int = 0) -> None:
        """graphs: capture CUDA graphs of these shapes (GPU kernel path on CUDA; eager static buffers elsewhere);
        num_state_slots: a hybrid model's linear-attention state slots (the scheduler's StateSlots ids), and
        num_state_snapshots more after them for its prefix cache (StatePrefixCache's snapshot i is slot
        num_state_slots + i); its graphs are decode buckets only, padding rows on one more (scratch) slot."""
        cfg = model.cfg
        self.model = model
        self.device = device
        self.block_size = block_size
        self.num_state_slots = num_state_slots
        if isinstance(model, HybridLM) and graphs is not None:
            graphs = replace(graphs, prefill_buckets=())  # its prefill rows run the chunked delta rule row by row
        use_graphs = graphs is not None and model.use_kernels
        self.states: LinearStateCache | None = None
        self._decode_states: DecodeStateInputs | None = None
        if isinstance(model, HybridLM):
            scratch = num_state_slots + num_state_snapshots
            check_state_memory(cfg.hybrid, scratch + int(use_graphs), dtype, device)
            self.states = model.allocate_states(scratch + int(use_graphs), device)
            if use_graphs and graphs.decode_buckets:
                self._decode_states = DecodeStateInputs(self.states, graphs.decode_buckets, scratch,
                                                        torch.device(device))
        # Graph padding rows write their KV to one extra block that the block manager never hands out.
        self.kv_caches = allocate_kv_cache(len(cfg.kv_layers), num_blocks + int(use_graphs), block_size,
                                           cfg.num_kv_heads, cfg.head_dim, dtype, device)
        self.graphs: StepGraphs | None = None
        self.eager_steps = 0  # steps without deepstack rows that no graph fitted
        self.capture_records: list[CaptureRecord] = []
        if use_graphs:
            self.graphs = StepGraphs(self._forward_hidden, graphs, block_size, num_blocks, torch.device(device),
                                     capture=torch.device(device).type == "cuda", media_width=cfg.hidden_size,
                                     media_dtype=dtype)
            with torch.inference_mode():
                self.capture_records = self.graphs.capture()
            for r in self.capture_records:
                log.info("thinker: captured %s graph of %d %s in %.2f s, %.1f MiB reserved", r.kind, r.size,
                         "rows" if r.kind == "decode" else "tokens", r.seconds, r.memory_bytes / 2**20)
            if self.capture_records:
                log.info("thinker: %d CUDA graphs, %.1f MiB in all", len(self.capture_records),
                         sum(r.memory_bytes for r in self.capture_records) / 2**20)
        if model.use_kernels and torch.device(device).type == "cuda":
            from runtime.kernels.paged_attention_triton import compile_prefill_variants  # noqa: PLC0415 - triton

            start = time.perf_counter()
            compile_prefill_variants(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, block_size, dtype,
                                     torch.device(device))
            log.info("thinker: compiled the prefill attention's split variants in %.2f s",
                     time.perf_counter() - start)
        if self.states is not None and use_graphs and torch.device(device).type == "cuda":
            seconds = warm_hybrid_steps(model, self.states, self.kv_caches, block_size, scratch_slot=scratch,
                                        scratch_block=num_blocks, device=torch.device(device),
                                        max_batch_tokens=graphs.max_batch_tokens)
            log.info("thinker: compiled the eager prefill steps' kernels in %.2f s", seconds)

    def _forward_hidden(self, ids: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext,
                        media: MediaRows | None) -> torch.Tensor:
        """Embedding (media rows in, on a prefill graph) through the final norm: what a graph captures. -> [T, H]."""
        if self._decode_states is not None:  # a hybrid model's graphs are decode graphs: one row per token
            return self.model(self.model.embed(ids), positions, ctx, self.kv_caches,
                              states=self._decode_states.context(ids.shape[0])).hidden
        x = self.model.embed(ids)
        return self.model(x if media is None else media.apply(x), positions, ctx, self.kv_caches).hidden

    @staticmethod
    def kv_bytes_per_block(model: ThinkerLM | HybridLM, block_size: int, dtype: torch.dtype) -> int:
        cfg = model.cfg
        element = torch.empty((), dtype=dtype).element_size()
        return 2 * len(cfg.kv_layers) * block_size * cfg.num_kv_heads * cfg.head_dim * element

    def release(self, seq: Sequence) -> None:
        pass  # all per-sequence state lives in its payload and block table

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch, pending: PendingTokens | None = None) -> torch.Tensor:
        packed = self._pack(batch.rows, pending)
        if self.graphs is not None and not (packed.visual_rows or packed.capture):  # deepstack rows run eagerly
            logits = self._run_graph(batch, packed, pending)
            if logits is not None:
                return logits
        ids = to_device(torch.tensor(packed.token_ids, dtype=torch.long), self.device)
        self._fill_pending(ids, packed, pending)
        x = self.model.embed(ids)  # [T, H], one embedding call for every row
        if packed.media_rows:
            rows = to_device(torch.tensor(packed.media_rows, dtype=torch.long), self.device)
            x[rows] = self._media_values(packed, x.dtype)
        deepstack = None
        if packed.visual_rows:
            deepstack = DeepstackInput(
                row_index=to_device(torch.tensor(packed.visual_rows, dtype=torch.long), self.device),
                features=[to_device(self._joined(level), self.device, x.dtype) for level in packed.visual_values])
        ctx = build_attention_context(
            q_lens=[r.num_tokens for r in batch.rows],
            kv_lens=[r.seq.num_computed_tokens + r.num_tokens for r in batch.rows],
            block_tables=[r.seq.block_table for r in batch.rows],
            block_size=self.block_size, device=self.device)
        positions = to_device(packed.position_table(), self.device)  # [3, T]
        capture_layer = self.model.cfg.accept_hidden_layer if packed.capture else None
        if self.states is not None:
            self._copy_states(batch, restore=True)
            out = self.model(x, positions, ctx, self.kv_caches, capture_layer=capture_layer,
                             states=self._state_context(batch))
            self._copy_states(batch, restore=False)
        else:
            out = self.model(x, positions, ctx, self.kv_caches, deepstack=deepstack, capture_layer=capture_layer)
        if packed.capture:  # one gather and one copy for all of them (a copy per row synced the stream per row)
            rows = to_device(torch.tensor([row for _, _, row in packed.capture], dtype=torch.long), self.device)
            states = out.captured[rows].float().cpu()
            for (request, prompt_index, _), state in zip(packed.capture, states):
                request.talker_states[prompt_index] = state
        return self.model.compute_logits(out.hidden[self._sampling_rows(batch, out.hidden.device)])

    def _run_graph(self, batch: ScheduledBatch, packed: _Packed, pending: PendingTokens | None) -> torch.Tensor | None:
        """A step (text, or media rows without deepstack) whose shape fits a captured graph: static inputs, replay,
        logits. None: run eagerly."""
        q_lens = [r.num_tokens for r in batch.rows]
        tables = [r.seq.block_table for r in batch.rows]
        graph = self.graphs.plan(q_lens, tables, media=bool(packed.media_rows))
        if graph is None:
            self.eager_steps += 1
            return None
        kv_lens = [r.seq.num_computed_tokens + r.num_tokens for r in batch.rows]
        positions = packed.position_table()
        media = self._media_values(packed, graph.media.values.dtype) if packed.media_rows else None
        self.graphs.prepare(graph, packed.token_ids, positions, q_lens, kv_lens, tables, packed.media_rows, media)
        self._fill_pending(graph.ids, packed, pending)
        if self._decode_states is not None:
            self._prepare_states(batch)
        self._before_replay(graph)
        hidden = self.graphs.execute(graph)[:len(packed.token_ids)]  # [T, H]
        if self._decode_states is not None:
            self._copy_states(batch, restore=False)
        if all(r.samples for r in batch.rows) and len(packed.token_ids) == len(batch.rows):
            return self.model.compute_logits(hidden)  # decode: every row samples
        return self.model.compute_logits(hidden[self._sampling_rows(batch, hidden.device)])

    def _before_replay(self, graph: StepGraph) -> None:
        """Runs just before `graph` replays its filled inputs: a tensor-parallel rank 0 tells its workers which
        graph to replay beside it (services/thinker/parallel/runner.py)."""

    def _state_context(self, batch: ScheduledBatch) -> StateContext:
        """Each row's state slot; a row starting its sequence (first step, or recompute after preemption) zeroes it."""
        assert self.states is not None and all(r.seq.state_slot is not None for r in batch.rows), \
            "a hybrid model's rows need the scheduler's StateSlots"
        return build_state_context(self.states, [r.num_tokens for r in batch.rows],
                                   [r.seq.state_slot for r in batch.rows],
                                   [r.seq.num_computed_tokens == 0 for r in batch.rows], self.device)

    def _prepare_states(self, batch: ScheduledBatch) -> None:
        """Before a hybrid decode graph replays: zero the slots of sequences starting (a one-token prompt), copy in
        prefix-hit snapshots, and point the graph's rows at the step's slots."""
        fresh = [r.seq.state_slot for r in batch.rows if r.seq.num_computed_tokens == 0]
        if fresh:
            self.states.reset(to_device(torch.tensor(fresh, dtype=torch.long), self.device))
        self._copy_states(batch, restore=True)
        self._decode_states.fill([r.seq.state_slot for r in batch.rows])

    def _copy_states(self, batch: ScheduledBatch, restore: bool) -> None:
        """Prefix hits resume from a snapshot (before the forward); boundary rows leave one (after it)."""
        pairs = [(self.num_state_slots + r.restore_from, r.seq.state_slot) if restore else
                 (r.seq.state_slot, self.num_state_slots + r.snapshot.index)
                 for r in batch.rows if (r.restore_from if restore else r.snapshot) is not None]
        if pairs:
            self.states.copy([src for src, _ in pairs], [dst for _, dst in pairs])

    def _media_values(self, packed: _Packed, dtype: torch.dtype) -> torch.Tensor:
        """The step's media rows [M, H] on the device, in `dtype`."""
        return to_device(self._joined(packed.media_values), self.device, dtype)

    def _joined(self, spans: list[torch.Tensor]) -> torch.Tensor:
        """Media slices as one host tensor, joined straight into pinned memory on CUDA (to_device would otherwise
        copy a video chunk's ~100 MB twice)."""
        out = torch.empty((sum(t.shape[0] for t in spans), spans[0].shape[1]), dtype=spans[0].dtype,
                          pin_memory=self.device.type == "cuda")
        return torch.cat(spans, out=out)

    @staticmethod
    def _sampling_rows(batch: ScheduledBatch, device: torch.device) -> torch.Tensor:
        """The packed row of each sampling row's last token, on `device` (through pinned memory)."""
        ends = torch.cumsum(torch.tensor([r.num_tokens for r in batch.rows]), 0) - 1
        last = [int(ends[i]) for i, r in enumerate(batch.rows) if r.samples]
        return to_device(torch.tensor(last, dtype=torch.long), device)

    def _fill_pending(self, ids: torch.Tensor, packed: _Packed, pending: PendingTokens | None) -> None:
        """Writes the tokens still being drawn into `ids` (on the device, after the step that draws them)."""
        if not packed.pending_rows:
            return
        assert pending is not None, "a PENDING_TOKEN without the step that draws it"
        n = len(packed.pending_rows)
        if packed.pending_rows == packed.pending_from == list(range(n)):
            ids[:n].copy_(pending.tokens[:n])  # steady decode: every row pending, in the last step's order
            return
        rows, src = (to_device(torch.tensor(v, dtype=torch.long), ids.device)
                     for v in (packed.pending_rows, packed.pending_from))
        ids.index_copy_(0, rows, pending.tokens.index_select(0, src))

    def _pack(self, rows: list[ScheduledRow], pending: PendingTokens | None) -> _Packed:
        num_levels = self.model.cfg.num_deepstack
        p = _Packed([], [], [], [], [], [[] for _ in range(num_levels)], [], [], [])
        for row in rows:
            seq = row.seq
            req: ThinkerRequest = seq.payload
            start, stop = seq.num_computed_tokens, seq.num_computed_tokens + row.num_tokens
            base = len(p.token_ids)
            p.token_ids.extend(seq.token_ids(start, stop))
            if stop == seq.num_tokens and seq.output_ids and seq.output_ids[-1] == PENDING_TOKEN:
                p.token_ids[-1] = 0  # any valid id: the device copy below replaces it
                p.pending_rows.append(len(p.token_ids) - 1)
                p.pending_from.append(pending.index[seq.seq_id] if pending is not None else -1)
            p.positions.append(_positions(req, seq.num_prompt_tokens, start, stop))
            for m in req.media:
                lo, hi = max(m.offset, start), min(m.end, stop)
                if lo < hi:
                    _pack_span(p, req, m, lo, hi, base - start, num_levels)
        return p


def _pack_span(p: _Packed, req: ThinkerRequest, m: MediaInput, lo: int, hi: int, shift: int, num_levels: int) -> None:
    """Prompt rows lo..hi of media item m, at packed rows lo + shift..: one slice per span, not one view per row (a
    60 s video is ~12k rows a request)."""
    span = slice(lo - m.offset, hi - m.offset)
    p.media_rows.extend(range(lo + shift, hi + shift))
    p.media_values.append(m.embeddings[span])
    if m.deepstack:
        if m.visual_mask is None:
            p.visual_rows.extend(range(lo + shift, hi + shift))
            picked: slice | torch.Tensor = span
        else:  # audio-in-video: only its video rows get deepstack
            picked = torch.tensor([i for i in range(span.start, span.stop) if m.visual_mask[i]], dtype=torch.long)
            p.visual_rows.extend(int(i) + m.offset + shift for i in picked)
        for level in range(num_levels):
            p.visual_values[level].append(m.deepstack[level][picked])
    if req.capture_talker_states:
        p.capture.extend((req, i, i + shift) for i in range(lo, hi) if i not in req.talker_states)


def _positions(req: ThinkerRequest, num_prompt: int, start: int, stop: int) -> torch.Tensor | range:
    """[3, stop - start]: prompt rows from the request's M-RoPE table, generated rows at index + rope_delta (the
    same on the three axes: a range when the rows are all generated, as every decode row's are)."""
    if start >= num_prompt:
        return range(start + req.rope_delta, stop + req.rope_delta)
    parts = []
    if start < num_prompt:
        parts.append(req.positions[:, start:min(stop, num_prompt)])
    if stop > num_prompt:
        gen = torch.arange(max(start, num_prompt), stop, dtype=torch.long) + req.rope_delta
        parts.append(gen.unsqueeze(0).expand(3, -1))
    return torch.cat(parts, dim=1)
