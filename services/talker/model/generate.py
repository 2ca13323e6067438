"""The plain batched talker loop: prefill, then per step code predictor -> frame -> next talker input -> next code."""
from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from runtime.errors import OmniError
from runtime.sampler.penalty import penalize
from runtime.sampler.rules import filter_logits, race
from runtime.sampler.streams import seeded_generator
from services.talker.model.frame_graphs import FrameGraphs, batch_buckets
from services.talker.model.frame_staging import FrameStaging
from services.talker.model.frame_step import FrameStep, SlotTables
from services.talker.model.load import TalkerModel
from services.talker.model.prefill_graphs import PrefillGraphs
from services.talker.model.prompt import Prefill, SpeechPrompt, build_prefill, trailing_text
from services.talker.model.sampling import GREEDY, TalkerSampling, top2_margin
from services.talker.model.state import TalkerState

__all__ = ["RowStart", "TalkerRunner", "TalkerState"]


@dataclass(frozen=True)
class RowStart:
    """What `TalkerRunner.start_many` needs to start one request's row."""

    prompt: SpeechPrompt
    first_token: int | None  # the thinker's first generated id; None when it wrote nothing
    sampling: TalkerSampling = GREEDY
    max_frames: int = 4095
    request_id: str = ""
    thinker_eos: frozenset[int] | None = None


@dataclass(frozen=True)
class _Pending:
    """A launched fast frame: its continuing rows, their positions in the batch, and where their codes land."""

    states: list[TalkerState]
    rows: list[int]
    codes: torch.Tensor  # (B,) long, host (pinned on CUDA), filled by a non-blocking copy
    copied: torch.cuda.Event | None  # recorded after that copy (None on CPU, where the copy is synchronous)


class TalkerRunner:
    """Runs TalkerStates one frame at a time, batched across rows; the engine drives it for continuous batching.

    `start` prefills one request; `step(states)` advances every given ready row by one frame and returns
    the frames `(B, G)`. Rows finish on the codec EOS or at `max_frames`; their cache slot is freed then.
    """

    def __init__(
        self, model: TalkerModel, max_rows: int, max_len: int, record_margins: bool = False,
        fast: bool = False, cuda_graphs: bool = False, prefill_tokens: int = 4096, defer: bool = False,
        ahead: bool = False,
    ) -> None:  # fmt: skip
        """`defer` and `ahead` (fast path): how `step` hands back a frame's codes, fixed for the runner's life (see
        `step`)."""
        if ahead and not (fast and defer and not record_margins):
            raise ValueError("TalkerRunner ahead=True launches a frame before reading the last one's codes: it needs "
                             "fast=True, defer=True and record_margins=False")
        self.model = model
        self.defer, self.ahead = defer and fast, ahead
        self.kv = model.lm.new_kv(max_rows, max_len)
        self.record_margins = record_margins
        cfg, vocab = model.cfg, model.cfg.lm.vocab_size
        # only the codebook and EOS are sampleable: the top 1024 ids are control codes
        self.suppress = torch.zeros(vocab, dtype=torch.bool, device=model.device)
        self.suppress[vocab - 1024 :] = True
        self.suppress[cfg.tokens.codec_eos] = False
        # per slot (the last row is the KV pool's scratch slot): seen codes, next code 0 and its talker state
        self.tables = SlotTables.allocate(max_rows, vocab, cfg.lm.hidden_size, model.dtype, model.device)
        self.seen = self.tables.seen
        # one frame's uniforms per row: the talker's vocabulary, then each codebook's; a greedy row's are zeros
        noise_width = vocab + (cfg.num_code_groups - 1) * cfg.code_predictor.vocab_size
        self._no_noise = torch.zeros(noise_width, device=model.device)
        # `fast`: frames run through FrameStep (fused kernels, no host sync), captured per batch bucket when
        # `cuda_graphs`; otherwise `step` is the plain reference loop below.
        self.frames: FrameGraphs | None = None
        self.prefills: PrefillGraphs | None = None  # `fast`: prefills through static buckets (graphs on CUDA)
        # launched fast frames whose new codes the host has not read yet, oldest first (two when the engine
        # launches a frame before reading the last one's codes: `ahead`)
        self._pending: deque[_Pending] = deque()
        if fast:
            step = FrameStep(model, self.kv, self.tables, self.suppress)
            capture = cuda_graphs and model.device.type == "cuda"
            self.frames = FrameGraphs(step, batch_buckets(max_rows), capture=capture)
            self.prefills = PrefillGraphs(model.lm, self.kv, batch_buckets(max_rows), prefill_tokens, capture)
            self._staging = FrameStaging(max_rows, self.kv.num_slots, model.device)
            # one buffer per frame in flight: a frame's codes land in it until `settle` reads them
            self._codes_host = [torch.zeros(max_rows, dtype=torch.long, pin_memory=model.device.type == "cuda")
                                for _ in range(2)]
            self._codes_buffer = 0

    @torch.no_grad()
    def start(
        self,
        prompt: SpeechPrompt,
        first_token: int | None,
        sampling: TalkerSampling = GREEDY,
        max_frames: int = 4095,
        request_id: str = "",
        thinker_eos: frozenset[int] | None = None,
    ) -> TalkerState:
        """Prefill one request from its prompt and the thinker's first token (None: the thinker wrote nothing)."""
        (result,) = self.start_many([RowStart(prompt, first_token, sampling, max_frames, request_id, thinker_eos)])
        if isinstance(result, OmniError):
            raise result
        return result

    @torch.no_grad()
    def start_many(self, requests: Sequence[RowStart]) -> list[TalkerState | OmniError]:
        """Prefill several requests in one padded forward: each gets its state, or the error its prompt raised.

        One forward instead of one per request: the prefill is launch-bound at these lengths, so rows that start
        together (a burst of arrivals) cost about what one does. Each row draws from its own generator as alone.
        """
        results: list[TalkerState | OmniError] = []
        rows: list[tuple[TalkerState, Prefill]] = []
        for req in requests:
            try:
                state, prefill = self._new_row(req)
            except OmniError as err:  # this request's prompt only; the others still start
                results.append(err)
                continue
            results.append(state)
            rows.append((state, prefill))
        if rows:
            self._prefill([state for state, _ in rows], [prefill for _, prefill in rows])
        return results

    def _new_row(self, req: RowStart) -> tuple[TalkerState, Prefill]:
        """The row's state and prompt, its slot taken (only once the prompt is known to be valid)."""
        model, tok = self.model, self.model.cfg.tokens
        generator = None
        if req.sampling.do_sample:
            generator = seeded_generator(req.sampling.seed if req.sampling.seed is not None else secrets.randbits(63),
                                         model.device)
        state = TalkerState(
            req.request_id, req.sampling, req.max_frames, req.thinker_eos or frozenset({model.cfg.thinker_eos}),
            tok.tts_eos, tok.tts_pad, generator,
        )  # fmt: skip
        first = tok.tts_eos if req.first_token is None or req.first_token in state.thinker_eos else req.first_token
        if first == tok.tts_eos:
            state.text_done = True  # the prefill carries the end marker itself; then only pads follow
        prefill = build_prefill(model, req.prompt, first)
        state.text.extend(prefill.pending_text)
        state.slot = self.kv.allocate()
        state.seen = self.seen[state.slot]
        state.seen.zero_()
        if self.frames is not None:
            self._staging.set_sampling(state.slot, req.sampling)
        return state, prefill

    def _prefill(self, states: list[TalkerState], prefills: list[Prefill]) -> None:
        """Run the prompts right-padded to the longest and choose each row's first code from its last position.

        A padding position only writes K/V past its row's prompt, which the row's own frames overwrite (position
        by position) before any query can reach them, and real queries never see keys past their own position.
        """
        dev = self.model.device
        lengths = [p.embeds.shape[0] for p in prefills]
        x = pad_sequence([p.embeds for p in prefills], batch_first=True)  # (B, L, hidden)
        positions = pad_sequence([p.positions.T for p in prefills], batch_first=True).permute(2, 0, 1)  # (3, B, L)
        slots = torch.tensor([s.slot for s in states], device=dev)
        hidden = self.prefills.run(x, positions, slots) if self.prefills is not None else None
        if hidden is None:  # no bucket holds it (or the reference path): eager
            hidden = self.model.lm(x, positions, self.kv, slots, slots * 0)  # (B, L, hidden)
        last = hidden[torch.arange(len(states), device=dev), torch.tensor(lengths, device=dev) - 1]
        for state, prefill, length in zip(states, prefills, lengths):
            state.cache_len, state.next_position = length, prefill.next_position
        self._advance(states, last, self._noise(states)[0])

    @torch.no_grad()
    def warm_up(self) -> None:
        """Start and end a few short rows per batch bucket, greedy and sampled, through the prefill and one frame.

        First calls pay one-time costs (this thread's library handles, kernel loading, allocator growth): on the
        H200 the first prefills of a fresh talker took 0.7-0.9 s against ~60 ms after. Leaves every slot free.
        """
        tok = self.model.cfg.tokens
        ids = [tok.im_start, tok.user, tok.tts_pad, tok.im_start, tok.assistant, tok.tts_pad]
        prompt = SpeechPrompt(ids, next(iter(self.model.cfg.speakers), "ethan"))
        for rows in batch_buckets(len(self.kv.free_slots)):
            for sampling in (GREEDY, TalkerSampling(seed=0)):
                states = [s for s in self.start_many([RowStart(prompt, None, sampling, max_frames=1)] * rows)
                          if isinstance(s, TalkerState)]
                live = [s for s in states if not s.finished]
                if live:
                    self.step(live)  # their one frame: each row ends there
                    self.settle()  # a deferring runner reads the frame's codes here
                for s in states:
                    if not s.finished:
                        self.release(s)

    @torch.no_grad()
    def step(self, states: Sequence[TalkerState]) -> torch.Tensor:
        """One frame for each ready row: `(B, G)` codes (codebook 0 first).

        With `defer` (fast path): return as soon as the frame is launched and read its new codes (which may end a
        row on the codec EOS) in the next `settle()` — the caller's host work then overlaps the GPU's frame. Call
        `settle()` before choosing the rows of the next step, or, with `ahead`, launch this frame first: its inputs
        need nothing the host reads from the last one (next codes, seen codes and states stay in the slot tables
        on the device); then `settle(keep=1)` reads the last frame's codes, and a row it ends on the codec EOS must
        drop this frame's row (and `void_frame` its count).
        """
        if not self.ahead:
            self.settle()
        elif len(self._pending) > 1:
            raise RuntimeError("an ahead step launches with at most one frame in flight: settle(keep=1) after each")
        if not all(s.is_ready for s in states):
            raise RuntimeError("step() got a finished row or one still waiting for thinker text")
        if self.frames is not None and not self.record_margins:
            frames = self._step_fast(states)
            if not self.defer:
                self.settle()
            return frames
        model, dev = self.model, self.model.device
        talker_noise, predictor_noise = self._noise(states)
        code0 = torch.tensor([s.code0 for s in states], device=dev)
        past = torch.stack([s.last_hidden for s in states])  # (B, hidden)
        margins: list[torch.Tensor] = []

        def pick(group: int, logits: torch.Tensor) -> torch.Tensor:
            return self._pick_residual(states, group, logits.float(), predictor_noise, margins)

        residuals = model.predictor.predict(past, model.lm.codec_embedding(code0), pick)
        frames = torch.cat((code0[:, None], residuals.codes), dim=1)
        go = []
        for i, s in enumerate(states):
            s.num_frames += 1
            if self.record_margins:
                s.margins.extend(float(m[i]) for m in margins)
            if s.num_frames >= s.max_frames:
                self._finish(s)
            else:
                go.append(i)
        if go:
            rows = [states[i] for i in go]
            text = trailing_text(model, torch.tensor([s.next_text() for s in rows], device=dev))
            x = (residuals.embed_sum[go] + text)[:, None]  # (b, 1, hidden)
            positions = torch.tensor([s.next_position for s in rows], device=dev).expand(3, -1)[:, :, None]
            slots = torch.tensor([s.slot for s in rows], device=dev)
            start = torch.tensor([s.cache_len for s in rows], device=dev)
            hidden = model.lm(x, positions, self.kv, slots, start)[:, -1]
            for s in rows:
                s.cache_len, s.next_position = s.cache_len + 1, s.next_position + 1
            self._advance(rows, hidden, talker_noise[go])
        return frames

    def _step_fast(self, states: Sequence[TalkerState]) -> torch.Tensor:
        """Launch one frame through FrameGraphs; the rows' next codes are read by `settle()`."""
        assert self.frames is not None
        going = [s.num_frames + 1 < s.max_frames for s in states]  # a row's last frame needs no talker step
        for s, go in zip(states, going):
            if go:
                self.kv.check_capacity(s.cache_len + 1)
        slots = [s.slot for s in states]
        mode = self._staging.mode(slots)
        talker_noise, predictor_noise = self._noise(states) if mode != "greedy" else (None, None)
        inputs = self._staging.inputs(
            [s.next_text() if go else s.tts_pad for s, go in zip(states, going)], slots,
            [s.cache_len for s in states], [s.next_position for s in states], talker_noise, predictor_noise,
        )  # fmt: skip
        out = self.frames.run(inputs, mode)
        self._codes_buffer ^= 1  # by turns: the last launch's frame may still be in flight in the other one
        codes = self._codes_host[self._codes_buffer][: len(states)]
        codes.copy_(out.next_code0, non_blocking=True)
        copied = torch.cuda.Event() if self.model.device.type == "cuda" else None
        if copied is not None:
            copied.record()
        frames = out.frames.clone()  # the graph's outputs are rewritten next frame
        continuing, rows = [], []
        for i, (s, go) in enumerate(zip(states, going)):
            s.num_frames += 1
            if go:
                s.cache_len, s.next_position = s.cache_len + 1, s.next_position + 1
                continuing.append(s)
                rows.append(i)
            else:
                self._finish(s)  # stream order keeps this frame's writes before a new owner's prefill
        self._pending.append(_Pending(continuing, rows, codes, copied))
        self._draw_ahead(continuing)  # while the GPU runs the frame
        return frames

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def settle(self, keep: int = 0) -> list[TalkerState]:
        """Read the launched frames' new codes, oldest first, all but the newest `keep` (waits for those frames):
        the codec EOS finishes its row. Returns every row whose new code was the EOS, even one finished meanwhile
        (at its frame limit, by a frame launched after): no frame launched after this one is that row's."""
        ended: list[TalkerState] = []
        eos = self.model.cfg.tokens.codec_eos
        while len(self._pending) > keep:
            pending = self._pending.popleft()
            if pending.copied is not None:
                pending.copied.synchronize()
            codes = pending.codes.tolist()
            for s, i in zip(pending.states, pending.rows):
                if codes[i] == eos:
                    ended.append(s)
                if s.finished:  # released meanwhile (client cancel), or at its frame limit by a later launch
                    continue
                s.code0 = codes[i]
                if s.code0 == eos:
                    self._finish(s)
        return ended

    @staticmethod
    def void_frame(state: TalkerState) -> None:
        """Uncount the frame an `ahead` step launched for a row that `settle` then ended: it is not the row's."""
        state.num_frames -= 1

    def capture_graphs(self) -> None:
        """Capture every frame and prefill graph now (the service does this at start, before it reports ready)."""
        if self.frames is not None and self.frames.graphs is not None:
            self.frames.capture_all()
        if self.prefills is not None and self.prefills.graphs is not None:
            self.prefills.capture_all()

    def release(self, state: TalkerState) -> None:
        """Free a row's cache slot early (client cancel); finished rows are freed already."""
        self._finish(state)

    def _finish(self, state: TalkerState) -> None:
        state.finished = True
        if state.slot >= 0:
            self.kv.release(state.slot)
            state.slot = -1

    def _noise(self, states: Sequence[TalkerState]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's uniforms for this step from its own generator: talker `(B, V)`, predictor `(B, G-1, V')`."""
        cfg = self.model.cfg
        v_talker, groups, v_pred = cfg.lm.vocab_size, cfg.num_code_groups - 1, cfg.code_predictor.vocab_size
        rows = []
        for s in states:
            if s.generator is None:
                rows.append(self._no_noise)  # only read (stacked into a new tensor)
            elif s.next_noise is not None:
                rows.append(s.next_noise)
                s.next_noise = None
            else:
                rows.append(self._draw(s))
        noise = torch.stack(rows)
        return noise[:, :v_talker], noise[:, v_talker:].view(len(states), groups, v_pred)

    def _draw_ahead(self, states: Sequence[TalkerState]) -> None:
        """Draw each sampling row's next-frame uniforms now; its generator yields the same stream either way."""
        for s in states:
            if s.generator is not None and s.next_noise is None:
                s.next_noise = self._draw(s)

    def _draw(self, state: TalkerState) -> torch.Tensor:
        """One frame's uniforms from the row's own generator (the layout of `_no_noise`)."""
        return torch.rand(self._no_noise.shape[0], generator=state.generator, device=self._no_noise.device)

    def _advance(self, states: Sequence[TalkerState], hidden: torch.Tensor, noise: torch.Tensor) -> None:
        """Choose each row's next codebook-0 code from the talker's hidden `(B, hidden)`; EOS finishes a row."""
        dev = hidden.device
        logits = self.model.lm.codec_head(hidden).float()
        penalty = torch.tensor([s.sampling.repetition_penalty for s in states], device=dev)
        logits = penalize(logits, torch.stack([s.seen for s in states]), penalty)
        logits = logits.masked_fill(self.suppress, float("-inf"))
        codes = self._pick(
            logits, states, noise, [(s.sampling.temperature, s.sampling.top_k, s.sampling.top_p) for s in states]
        )
        if self.record_margins:
            for s, gap in zip(states, top2_margin(logits).tolist()):
                s.margins.append(gap)
        if self.frames is not None:  # the fast frames read these from the slot tables
            slots = torch.tensor([s.slot for s in states], device=dev)
            self.tables.code0.index_copy_(0, slots, codes)
            self.tables.hidden.index_copy_(0, slots, hidden.to(self.tables.hidden.dtype))
        for s, h, code in zip(states, hidden, codes.tolist()):
            s.code0, s.last_hidden = code, h
            s.seen[code] = True
            if code == self.model.cfg.tokens.codec_eos:
                self._finish(s)

    def _pick_residual(
        self, states: Sequence[TalkerState], group: int, logits: torch.Tensor, noise: torch.Tensor,
        margins: list[torch.Tensor],
    ) -> torch.Tensor:  # fmt: skip
        if self.record_margins:
            margins.append(top2_margin(logits))
        knobs = [(s.predictor_temperature, s.predictor_top_k, s.predictor_top_p) for s in (r.sampling for r in states)]
        return self._pick(logits, states, noise[:, group - 1], knobs)

    @staticmethod
    def _pick(
        logits: torch.Tensor, states: Sequence[TalkerState], noise: torch.Tensor, knobs: list[tuple[float, int, float]]
    ) -> torch.Tensor:
        """argmax for greedy rows; temperature/top-k/top-p then a seeded draw for sampling rows."""
        greedy = logits.argmax(dim=-1)
        sample = [s.sampling.do_sample for s in states]
        if not any(sample):
            return greedy
        dev = logits.device
        temperature, top_k, top_p = (torch.tensor(col, device=dev) for col in zip(*knobs))
        drawn = race(filter_logits(logits / temperature.float()[:, None], top_k, top_p), noise)
        return torch.where(torch.tensor(sample, device=dev), drawn, greedy)
