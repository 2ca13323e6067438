"""Batched sampling on the logits' device: penalties, temperature, top-k/top-p/min-p, per-row seeded streams."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.engine.sampling_params import SamplingOptions
from runtime.kernels._backend import triton_importable
from runtime.transfer import to_device, to_host

MAX_TOP_LOGPROBS = 20
# Sampled rows whose top-k keeps at most this many tokens (the model's default keeps 20) and that want no logprobs
# draw from a top-k of the vocabulary, not a sort of it: _draw_among_top
NARROW_TOP_K = 64


@dataclass
class SampleResult:
    token_ids: list[int]
    logprobs: list[float] | None  # of each sampled token under the distribution sampled from
    top_ids: list[list[int]] | None
    top_logprobs: list[list[float]] | None


@dataclass
class PendingSample:
    """A batch's draws, queued on the logits' device with their copies to the host: `result()` waits for those
    copies only (an event, not the stream: a step launched after this one keeps running), so the engine can launch
    its next step first. `tokens` stays on the device for that next step to read."""

    tokens: torch.Tensor  # [B] long, on the device
    host: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]  # tokens, lps, top lps/ids
    ready: torch.cuda.Event | None  # recorded after the copies (None: already on the host)

    def result(self) -> SampleResult:
        if self.ready is not None:
            self.ready.synchronize()
        tokens, lps, top_lps, top_ids = self.host
        return SampleResult(tokens.tolist(), lps.tolist() if lps is not None else None,
                            top_ids.tolist() if top_ids is not None else None,
                            top_lps.tolist() if top_lps is not None else None)


def _pending(tokens: torch.Tensor, *others: torch.Tensor | None) -> PendingSample:
    """Starts the copies of `tokens` and `others` to pinned host memory (on CUDA; a CPU batch is there already)."""
    host = tuple(None if t is None else to_host(t) for t in (tokens, *others))
    ready = None
    if tokens.device.type == "cuda":
        ready = torch.cuda.Event()
        ready.record()
    return PendingSample(tokens, host, ready)  # type: ignore[arg-type]


class RowGenerators:
    """One torch.Generator per request, so a request's seed gives the same tokens whatever else is in the batch."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._gens: dict[int, torch.Generator] = {}

    def get(self, seq_id: int, seed: int) -> torch.Generator:
        g = self._gens.get(seq_id)
        if g is None:
            g = torch.Generator(device=self._device)
            g.manual_seed(seed)
            self._gens[seq_id] = g
        return g

    def drop(self, seq_id: int) -> None:
        self._gens.pop(seq_id, None)


def apply_penalties(logits: torch.Tensor, options: list[SamplingOptions], histories: list[list[int]],
                    outputs: list[list[int]], newest: list[torch.Tensor | None] | None = None) -> torch.Tensor:
    """Repetition penalty over prompt+output tokens; presence and frequency penalties over output tokens.

    `newest[i]`: row i's latest output token when it is still on the device ((1,) long; the engine running a step
    ahead), counted as one more output after `histories[i]` and `outputs[i]`, which then leave it out."""
    # logits: [B, V]
    B, V = logits.shape
    device = logits.device
    for i, opts in enumerate(options):
        if not opts.needs_penalties:
            continue
        row = logits[i]
        last = newest[i] if newest is not None else None
        if opts.repetition_penalty != 1.0 and (histories[i] or last is not None):
            seen = torch.zeros(V, dtype=torch.bool, device=device)
            if histories[i]:
                seen[to_device(torch.tensor(sorted(set(histories[i])), dtype=torch.long), device)] = True
            if last is not None:
                seen.index_fill_(0, last, True)
            penalized = torch.where(row > 0, row / opts.repetition_penalty, row * opts.repetition_penalty)
            row.copy_(torch.where(seen, penalized, row))
        if (opts.presence_penalty or opts.frequency_penalty) and (outputs[i] or last is not None):
            counts = torch.zeros(V, dtype=torch.long, device=device)  # index_add_, not bincount: it reads its max back
            if outputs[i]:
                ids = to_device(torch.tensor(outputs[i], dtype=torch.long), device)
                counts.index_add_(0, ids, torch.ones_like(ids))
            if last is not None:
                counts.index_add_(0, last, torch.ones_like(last))
            row -= opts.frequency_penalty * counts.to(row.dtype)
            row -= opts.presence_penalty * (counts > 0).to(row.dtype)
    return logits


def _filter(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    # logits: [B, V] already divided by temperature; masked entries become -inf.
    sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
    sorted_logits = _mask_sorted(sorted_logits, top_k, top_p, min_p)
    return torch.empty_like(logits).scatter_(1, sorted_idx, sorted_logits)


def _mask_sorted(sorted_logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 min_p: torch.Tensor) -> torch.Tensor:
    """Each row's logits in descending order -> the same with what top-k, then top-p and min-p drop set to -inf."""
    width = sorted_logits.shape[-1]
    ranks = torch.arange(width, device=sorted_logits.device).unsqueeze(0)  # [1, W]
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, width)).unsqueeze(1)  # [B, 1]
    drop = ranks >= k
    # top-p and min-p act on what top-k kept, renormalised (as transformers and vLLM do)
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    cum_before = torch.cumsum(probs, dim=-1) - probs  # mass strictly above each rank
    drop |= (cum_before >= top_p.unsqueeze(1)) & (top_p.unsqueeze(1) < 1.0)  # float cumsum reaches 1 early: 1 is off
    drop |= probs < (min_p.unsqueeze(1) * probs[:, :1])
    drop[:, 0] = False  # the most likely token always survives
    return sorted_logits.masked_fill(drop, float("-inf"))


def _knob_table(options: list[SamplingOptions], device: torch.device) -> torch.Tensor:
    """Each row's (top_k, top_p, min_p) on `device` as one [B, 3] float32 table, in one upload."""
    return to_device(torch.tensor([[o.top_k, o.top_p, o.min_p] for o in options], dtype=torch.float32), device)


def _split_knobs(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A `_knob_table` as _mask_sorted takes it: top_k [B] long, top_p and min_p [B] float32."""
    return table[:, 0].long(), table[:, 1], table[:, 2]


def _draws_among_top(options: SamplingOptions) -> bool:
    """Whether a row draws on the narrow path: a sampled row whose top-k leaves at most NARROW_TOP_K candidates and
    that asks for no logprobs. Decided by the row's own options, so a seed gives the same tokens in any batch."""
    return (not options.is_greedy and 1 <= options.top_k <= NARROW_TOP_K and not options.logprobs
            and not options.top_logprobs)


def _draw_among_top(scaled: torch.Tensor, knobs: torch.Tensor, generators: list[torch.Generator | None]
                    ) -> torch.Tensor:  # fmt: skip
    """Tokens for rows that draw among their NARROW_TOP_K best: `scaled` [N, V] (penalised, over temperature) and
    their `_knob_table` rows -> [N]. The same distribution as the full path (top-k, then top-p and min-p on it),
    from a top-k of the vocabulary instead of a sort of it, and one exponential race over NARROW_TOP_K values per
    row (a fixed count: a row's stream advances alike in any batch). On CUDA the masks and the race are one Triton
    launch (top_draw_triton)."""
    # [N, K], descending; K is the same for every batch of a model (its vocabulary is wider in any real one)
    values, ids = torch.topk(scaled, min(NARROW_TOP_K, scaled.shape[-1]), dim=-1)
    draws = torch.empty_like(values).exponential_()  # the unseeded rows' draws, one launch
    for row, generator in enumerate(generators):
        if generator is not None:
            draws[row].exponential_(generator=generator)
    if scaled.is_cuda and triton_importable():
        from runtime.engine.top_draw_triton import draw_among_top_triton  # imports triton

        return draw_among_top_triton(values, ids, knobs, draws, scaled.shape[-1])
    return draw_among_top_reference(values, ids, knobs, draws, scaled.shape[-1])


def draw_among_top_reference(values: torch.Tensor, ids: torch.Tensor, knobs: torch.Tensor, draws: torch.Tensor,
                             vocab: int) -> torch.Tensor:
    """The narrow path's draw in torch: `values`/`ids` [N, K] a descending top-k of the scaled logits, `knobs` a
    `_knob_table`, `draws` [N, K] each row's exponentials in stream order -> tokens [N]."""
    kept = _mask_sorted(values, *_split_knobs(knobs))
    # The r-th draw goes to the kept token with the r-th smallest id, not to rank r: tied logits may come out of
    # topk in another order for another batch shape, and a token's draw must not depend on that.
    by_id = torch.where(torch.isfinite(kept), ids, vocab).argsort(dim=-1, stable=True)
    noise = torch.empty_like(draws).scatter_(1, by_id, draws)
    # Exponential race: argmax(p / E) with E ~ Exp(1) is a draw from p; softmax's sum cancels in the argmax
    picked = torch.argmax(torch.softmax(kept, dim=-1) / noise, dim=-1)
    return ids.gather(1, picked.unsqueeze(1)).squeeze(1)


def sample(logits: torch.Tensor, options: list[SamplingOptions], generators: list[torch.Generator | None],
           histories: list[list[int]], outputs: list[list[int]]) -> SampleResult:
    """Samples one token per row of `logits` [B, V] (float32). Greedy rows take the argmax."""
    return launch_sample(logits, options, generators, histories, outputs).result()


def launch_sample(logits: torch.Tensor, options: list[SamplingOptions], generators: list[torch.Generator | None],
                  histories: list[list[int]], outputs: list[list[int]],
                  newest: list[torch.Tensor | None] | None = None) -> PendingSample:
    """`sample` without the read-back: every draw is queued on the logits' device (`newest`: see apply_penalties)."""
    want_lp = any(o.logprobs for o in options)
    want_top = max((o.top_logprobs for o in options), default=0)
    if not want_lp and not want_top and all(o.is_greedy and not o.needs_penalties for o in options):
        # the common decode batch: one launch, instead of a copy, a scale and a host-to-device copy of temperatures
        # a step (each on the path from one step's end to the next's launch)
        return _pending(torch.argmax(logits, dim=-1), None, None, None)
    logits = logits.float()
    if any(o.needs_penalties for o in options):  # they write into the logits: the caller's stay as they were
        logits = apply_penalties(logits.clone(), options, histories, outputs, newest)
    device = logits.device
    temps = to_device(torch.tensor([o.temperature if o.temperature > 0 else 1.0 for o in options]), device)
    scaled = logits / temps.unsqueeze(1)
    among_top = [_draws_among_top(o) for o in options]
    narrow = [i for i, yes in enumerate(among_top) if yes]
    # the other sampled rows sort the vocabulary (~0.5 ms a step at 152k on the H200 for a batch)
    sampled_rows = [i for i, (o, yes) in enumerate(zip(options, among_top)) if not o.is_greedy and not yes]
    knobs = _knob_table(options, device) if narrow or sampled_rows else None  # one upload for both paths
    final = scaled
    if sampled_rows:
        greedy = to_device(torch.tensor([o.is_greedy for o in options]), device)
        # Greedy rows are scored on the unfiltered distribution: their logprobs are the model's (after penalties).
        final = torch.where(greedy.unsqueeze(1), scaled, _filter(scaled, *_split_knobs(knobs)))
    if len(narrow) == len(options):  # the common sampled batch: every row on the model's defaults
        tokens = _draw_among_top(scaled, knobs, generators)
    else:
        tokens = torch.argmax(final, dim=-1)
        if narrow:
            rows = to_device(torch.tensor(narrow), device)
            tokens[rows] = _draw_among_top(scaled[rows], knobs[rows], [generators[i] for i in narrow])
    logprobs_all = torch.log_softmax(final, dim=-1) if (sampled_rows or want_lp or want_top) else None
    if sampled_rows:
        probs = logprobs_all.exp()
        for i in sampled_rows:
            # Exponential race: argmax(p / E) with E ~ Exp(1) is a draw from p, using only this row's stream.
            noise = torch.empty_like(probs[i]).exponential_(generator=generators[i])
            tokens[i] = torch.argmax(probs[i] / noise)
    lps = logprobs_all.gather(1, tokens.unsqueeze(1)).squeeze(1) if want_lp else None
    top = torch.topk(logprobs_all, min(want_top, MAX_TOP_LOGPROBS), dim=-1) if want_top else None
    return _pending(tokens, lps, *((top.values, top.indices) if top is not None else (None, None)))
