"""CUDA graphs of the Thinker forward: decode batch buckets and a prefill token ladder over static input buffers.

Each graph owns a fixed shape: N token rows and B sequence slots. A step that fits is copied into the static buffers
(two host-to-device copies) and replayed; rows past the step's own are padding that writes its KV to a scratch
block no sequence owns, so a replay never touches real cache slots beyond the step's. Decode graphs hold B one-token
sequences; prefill graphs hold up to max_num_seqs sequences of any lengths plus one padding sequence. Off CUDA the
same buffers run eagerly (capture=False), which keeps the padding logic testable on CPU.

Prefill graphs also take media rows (audio, or vision without deepstack): a mask in the int64 upload says which rows
take the static media buffer's values over their token embeddings, so a Qwen3-ASR or Qwen3-Omni audio prompt replays
like text instead of running eagerly.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from runtime.attention import AttentionContext
from runtime.graph_capture import GraphCapture
from runtime.transfer import to_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GraphSettings:
    decode_buckets: tuple[int, ...]  # rows of decode-only steps
    prefill_buckets: tuple[int, ...]  # tokens of any step (prefill chunks, mixed), up to max_batch_tokens
    max_num_seqs: int
    max_model_len: int
    max_batch_tokens: int = 0  # the largest step the engine runs (a hybrid model's eager warm-up runs one)


@dataclass(frozen=True)
class CaptureRecord:
    kind: str  # "decode" | "prefill"
    size: int  # rows (decode) or tokens (prefill)
    seconds: float
    memory_bytes: int  # memory the caching allocator reserved for it (graph pool and warm-up), shared pool included


@dataclass(frozen=True)
class MediaRows:
    """A prefill graph's media inputs: row i's embedding is values[i] where mask[i] != 0, its token's elsewhere."""

    mask: torch.Tensor  # int64 [N], uploaded with the step's ids
    values: torch.Tensor  # [N, H] in the model's dtype: a view of one buffer every prefill graph shares

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where((self.mask != 0).unsqueeze(1), self.values, x)


@dataclass
class StepGraph:
    """Static views of one shape into the shared flat buffers, and its graph and output once captured."""

    kind: str
    num_tokens: int  # N
    num_seqs: int  # B (prefill: max_num_seqs sequences + the padding one)
    ids: torch.Tensor  # int64 [N]
    positions: torch.Tensor  # int64 [3, N]
    ctx: AttentionContext
    media: MediaRows | None = None  # prefill graphs of a StepGraphs built with media_width
    graph: torch.cuda.CUDAGraph | None = None
    hidden: torch.Tensor | None = None  # [N, H], the captured forward's output

    @property
    def int64_len(self) -> int:  # ids, positions, slots (+ the media mask of a prefill graph)
        return (6 if self.kind == "prefill" else 5) * self.num_tokens

    @property
    def int32_len(self) -> int:
        return 2 * self.num_seqs + 1 + self.num_seqs * self.ctx.block_tables.shape[1]


class StepGraphs:
    """Plans a step onto a graph, fills its static inputs and replays it (or runs it eagerly off CUDA)."""

    def __init__(self, forward: Callable[[torch.Tensor, torch.Tensor, AttentionContext, MediaRows | None],
                                         torch.Tensor],
                 settings: GraphSettings, block_size: int, scratch_block: int, device: torch.device,
                 capture: bool, media_width: int = 0, media_dtype: torch.dtype = torch.float32) -> None:
        """media_width: the embeddings' width H, where prefill graphs take media rows (0: they take none)."""
        self.forward = forward  # (ids [N], positions [3, N], ctx, media) -> hidden [N, H]
        self.block_size = block_size
        self.scratch_block = scratch_block
        self.device = device
        self.capture_graphs = capture
        max_rung = max(settings.prefill_buckets, default=0)
        self.width = max(-(-settings.max_model_len // block_size), -(-max_rung // block_size))  # block table W
        shapes = [("decode", b, b) for b in settings.decode_buckets]
        shapes += [("prefill", n, settings.max_num_seqs + 1) for n in settings.prefill_buckets]
        n64 = max((6 * n for _, n, _ in shapes), default=0)
        n32 = max((2 * b + 1 + b * self.width for _, _, b in shapes), default=0)
        self._dev64 = torch.zeros(n64, dtype=torch.int64, device=device)
        self._dev32 = torch.zeros(n32, dtype=torch.int32, device=device)
        pin = device.type == "cuda"
        self._host64 = torch.zeros(n64, dtype=torch.int64, pin_memory=pin)
        self._host32 = torch.zeros(n32, dtype=torch.int32, pin_memory=pin)
        self._np64, self._np32 = self._host64.numpy(), self._host32.numpy()
        self.media_values = (torch.zeros(max_rung, media_width, dtype=media_dtype, device=device)
                             if media_width and max_rung else None)
        self._copied: torch.cuda.Event | None = None
        self.decode = {n: self._views(k, n, b) for k, n, b in shapes if k == "decode"}
        self.prefill = {n: self._with_media(self._views(k, n, b)) for k, n, b in shapes if k == "prefill"}
        self._capturer: GraphCapture | None = None  # made at capture: its memory pool is CUDA's
        self.replays: dict[str, int] = {}  # "kind:size" -> steps run on that graph

    def _views(self, kind: str, n: int, b: int) -> StepGraph:
        w = self.width
        bt = self._dev32[2 * b + 1:2 * b + 1 + b * w].view(b, w)  # [B, W]
        q_lens_host = [1] * b if kind == "decode" else [n] + [0] * (b - 1)  # max is the grid's query length
        ctx = AttentionContext(cu_seqlens_q=self._dev32[:b + 1], kv_lens=self._dev32[b + 1:2 * b + 1],
                               slot_mapping=self._dev64[4 * n:5 * n], block_tables=bt, block_size=self.block_size,
                               q_lens_host=q_lens_host, kv_lens_host=[0] * b)
        return StepGraph(kind, n, b, self._dev64[:n], self._dev64[n:4 * n].view(3, n), ctx)

    def _with_media(self, g: StepGraph) -> StepGraph:
        if self.media_values is not None:
            n = g.num_tokens
            g.media = MediaRows(self._dev64[5 * n:6 * n], self.media_values[:n])
        return g

    @property
    def graphs(self) -> list[StepGraph]:
        return [*self.decode.values(), *self.prefill.values()]

    def plan(self, q_lens: list[int], tables: list[list[int]], media: bool = False) -> StepGraph | None:
        """The smallest graph that holds this step (`media`: it has media rows), or None (run eagerly)."""
        if any(len(t) > self.width for t in tables) or (media and self.media_values is None):
            return None
        if all(q == 1 for q in q_lens) and not media:
            fits = [b for b in self.decode if b >= len(q_lens)]
            if fits:
                return self.decode[min(fits)]
        total = sum(q_lens)
        fits = [n for n, g in self.prefill.items() if n >= total and g.num_seqs > len(q_lens)]
        return self.prefill[min(fits)] if fits else None

    def run(self, g: StepGraph, token_ids: list[int], positions: torch.Tensor, q_lens: list[int],
            kv_lens: list[int], tables: list[list[int]]) -> torch.Tensor:
        """Fill g's inputs from the step (positions [3, T] on the host) and run it -> hidden [T, H]."""
        self.prepare(g, token_ids, positions, q_lens, kv_lens, tables)
        return self.execute(g)[:len(token_ids)]

    def prepare(self, g: StepGraph, token_ids: list[int], positions: torch.Tensor, q_lens: list[int],
                kv_lens: list[int], tables: list[list[int]], media_rows: list[int] | None = None,
                media_values: torch.Tensor | None = None) -> None:
        """Copy a step into g's static inputs, padding rows pointed at the scratch block; `media_values` [M, H] on
        the device replace the embeddings of packed rows `media_rows` (a prefill graph's)."""
        self._fill(g, token_ids, positions, q_lens, kv_lens, tables, media_rows or [])
        self._upload(g)
        if media_rows:
            assert g.media is not None, "media rows on a graph without media inputs"
            g.media.values.index_copy_(0, to_device(torch.tensor(media_rows, dtype=torch.long), self.device),
                                       media_values)

    def execute(self, g: StepGraph) -> torch.Tensor:
        """Replay g (or run it eagerly when not captured) on its current inputs -> hidden [N, H]."""
        self.replays[f"{g.kind}:{g.num_tokens}"] = self.replays.get(f"{g.kind}:{g.num_tokens}", 0) + 1
        if g.graph is not None:
            g.graph.replay()
            return g.hidden
        return self.forward(g.ids, g.positions, g.ctx, g.media)

    def _fill(self, g: StepGraph, token_ids: list[int], positions: torch.Tensor, q_lens: list[int],
              kv_lens: list[int], tables: list[list[int]], media_rows: list[int]) -> None:
        if self._copied is not None:
            self._copied.synchronize()  # the previous upload has left the pinned buffers
        n, b, w, bs = g.num_tokens, g.num_seqs, self.width, self.block_size
        t = len(token_ids)
        h64, h32 = self._np64, self._np32
        h64[:t] = token_ids
        h64[t:n] = 0
        pos = h64[n:4 * n].reshape(3, n)
        pos[:, :t] = positions.numpy()
        pos[:, t:] = 0
        slots = h64[4 * n:5 * n]
        if g.kind == "prefill":
            mask = h64[5 * n:6 * n]
            mask[:] = 0
            mask[media_rows] = 1
        cu, kv = h32[:b + 1], h32[b + 1:2 * b + 1]
        bt = h32[2 * b + 1:2 * b + 1 + b * w].reshape(b, w)
        row = 0
        cu[0] = 0
        for i, (q, k, table) in enumerate(zip(q_lens, kv_lens, tables)):
            for p in range(k - q, k):
                slots[row] = table[p // bs] * bs + p % bs
                row += 1
            cu[i + 1] = row
            kv[i] = k
            bt[i, :len(table)] = table
        pad = n - t
        scratch = self.scratch_block * bs
        seqs = len(q_lens)
        if g.kind == "decode":  # each padding row is a one-token sequence over the scratch slot
            slots[t:] = scratch
            cu[seqs + 1:] = np.arange(seqs + 1, b + 1)
            kv[seqs:] = 1
            bt[seqs:, 0] = self.scratch_block
        else:  # one padding sequence holds every padding token; its table repeats the scratch block
            slots[t:] = scratch + np.arange(pad) % bs
            cu[seqs + 1:] = n
            kv[seqs] = pad
            kv[seqs + 1:] = 0
            bt[seqs, :-(-pad // bs)] = self.scratch_block

    def _upload(self, g: StepGraph) -> None:
        self._dev64[:g.int64_len].copy_(self._host64[:g.int64_len], non_blocking=True)
        self._dev32[:g.int32_len].copy_(self._host32[:g.int32_len], non_blocking=True)
        if self.device.type == "cuda":
            self._copied = torch.cuda.Event()
            self._copied.record()

    def capture(self) -> list[CaptureRecord]:
        """Capture every graph, largest first so the smaller ones reuse the shared memory pool."""
        if not self.capture_graphs:
            return []
        records = []
        self._capturer = GraphCapture(self.device)  # two warm-ups: Triton compiles, cuBLAS sizes its workspaces
        order = sorted(self.graphs, key=lambda g: (g.kind == "decode", -g.num_tokens))
        for g in order:
            records.append(self._capture_one(g))
        return records

    def _capture_one(self, g: StepGraph) -> CaptureRecord:
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        reserved = torch.cuda.memory_reserved(self.device)
        empty = torch.empty(3, 0, dtype=torch.int64)
        self.prepare(g, [], empty, [], [], [])  # all padding: warm-up and capture write only the scratch block
        assert self._capturer is not None
        g.graph, g.hidden = self._capturer.capture(lambda: self.forward(g.ids, g.positions, g.ctx, g.media))
        torch.cuda.synchronize()
        used = torch.cuda.memory_reserved(self.device) - reserved
        return CaptureRecord(g.kind, g.num_tokens, time.perf_counter() - t0, used)
