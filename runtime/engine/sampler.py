"""The thinker's batched sampling on the logits' device: its penalties and logprobs around the one sampler
(runtime/sampler: temperature, top-k/top-p/min-p, per-row seeded draws)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.engine.sampling_params import SamplingOptions
from runtime.sampler.knobs import WIDTH, RowKnobs
from runtime.sampler.penalty import penalize
from runtime.sampler.pick import pick
from runtime.sampler.rules import filter_logits, race
from runtime.sampler.streams import row_uniforms
from runtime.transfer import to_device, to_host

MAX_TOP_LOGPROBS = 20


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
            row.copy_(penalize(row, seen, opts.repetition_penalty))
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


def _draws_among_top(options: SamplingOptions) -> bool:
    """Whether a row is drawn by `pick` among its WIDTH best (one kernel launch on CUDA) rather than from a sort of
    the vocabulary: a sampled row whose top-k keeps at most WIDTH tokens and that asks for no logprobs. Both give
    the same token for the same uniforms; the choice only saves the sort."""
    return not options.is_greedy and 1 <= options.top_k <= WIDTH and not options.logprobs and not options.top_logprobs


def _pick_narrow(logits: torch.Tensor, options: list[SamplingOptions], generators: list[torch.Generator | None]
                 ) -> torch.Tensor:  # fmt: skip
    """Tokens for rows that `_draws_among_top`: `logits` [N, V] (penalised, not yet over temperature) -> [N]. Each
    row's stream gives V uniforms a step, one per vocabulary id, whichever path draws it."""
    knobs = RowKnobs.from_settings([(True, o.temperature, o.top_k, o.top_p, o.min_p) for o in options], logits.device)
    return pick(logits, row_uniforms(generators, logits.shape[-1], logits.device), knobs)


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
    among_top = [_draws_among_top(o) for o in options]
    narrow = [i for i, yes in enumerate(among_top) if yes]
    # the other sampled rows sort the vocabulary (~0.5 ms a step at 152k on the H200 for a batch)
    wide = [i for i, (o, yes) in enumerate(zip(options, among_top)) if not o.is_greedy and not yes]
    if len(narrow) == len(options):  # the common sampled batch, every row on the model's defaults: one pick
        return _pending(_pick_narrow(logits, options, generators), None, None, None)
    temps = to_device(torch.tensor([o.temperature if o.temperature > 0 else 1.0 for o in options]), device)
    scaled = logits / temps.unsqueeze(1)
    # Greedy rows are scored on the unfiltered distribution: their logprobs are the model's (after penalties).
    final = scaled
    if wide:
        wide_rows = to_device(torch.tensor(wide), device)
        top_k, top_p, min_p = to_device(torch.tensor([[options[i].top_k, options[i].top_p, options[i].min_p]
                                                      for i in wide], dtype=torch.float64), device).unbind(1)
        filtered = filter_logits(scaled.index_select(0, wide_rows), top_k, top_p, min_p)
        final = scaled.index_copy(0, wide_rows, filtered)
    tokens = torch.argmax(final, dim=-1)
    if narrow:
        rows = to_device(torch.tensor(narrow), device)
        tokens[rows] = _pick_narrow(logits[rows], [options[i] for i in narrow], [generators[i] for i in narrow])
    if wide:
        tokens[wide_rows] = race(filtered, row_uniforms([generators[i] for i in wide], logits.shape[-1], device))
    logprobs_all = torch.log_softmax(final, dim=-1) if (want_lp or want_top) else None
    lps = logprobs_all.gather(1, tokens.unsqueeze(1)).squeeze(1) if want_lp else None
    top = torch.topk(logprobs_all, min(want_top, MAX_TOP_LOGPROBS), dim=-1) if want_top else None
    return _pending(tokens, lps, *((top.values, top.indices) if top is not None else (None, None)))
