"""The thinker's domain: a request in, its tokens, text, talker conditioning and finish out (no protobuf here)."""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import torch

from runtime.engine.engine import TokenEvent
from runtime.engine.engine_loop import EngineLoop
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sequence import FinishReason, Sequence
from runtime.errors import InvalidArgument, ResourceExhausted, Unavailable
from runtime.metrics import Metrics
from runtime.tokenizer import Tokenizer
from services.thinker.request import ThinkerRequest
from services.thinker.text_output import TextOutput

log = logging.getLogger(__name__)


@dataclass
class GenerateInput:
    request_id: str
    token_ids: list[int]
    sampling: SamplingOptions
    request: ThinkerRequest


@dataclass
class TokensOut:
    token_ids: list[int]
    text: str
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] = field(default_factory=list)


@dataclass
class ConditioningOut:
    media_hidden: torch.Tensor  # [media rows, H]


@dataclass
class FinishedOut:
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    queue_seconds: float
    compute_seconds: float


class ThinkerService:
    """Admits requests into the engine and turns its per-step events into coalesced stream outputs."""

    def __init__(self, engine: EngineLoop, tokenizer: Tokenizer, metrics: Metrics, max_model_len: int,
                 flush_seconds: float, max_in_flight: int) -> None:
        self.engine = engine
        self.max_in_flight = max_in_flight  # running rows + waiting queue: beyond it, back-pressure
        self._in_flight = 0
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.max_model_len = max_model_len
        self.flush_seconds = flush_seconds
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids)
        self._ids = itertools.count()
        # The detokeniser's byte table takes ~0.5 s to build: here, not inside the first stream, where it would
        # stall the event loop and every other stream with it.
        tokenizer.token_bytes(0)

    def check_prompt(self, token_ids: list[int]) -> None:
        if len(token_ids) >= self.max_model_len:
            raise InvalidArgument("start.token_ids", f"prompt has {len(token_ids)} tokens; the model's context is "
                                  f"{self.max_model_len}, which must leave room for at least one new token")

    async def generate(self, inp: GenerateInput) -> AsyncIterator[TokensOut | ConditioningOut | FinishedOut]:
        self.check_prompt(inp.token_ids)
        if self.engine.failure is not None:
            raise Unavailable(f"the thinker engine has failed: {self.engine.failure!r}", stage="thinker")
        if self._in_flight >= self.max_in_flight:
            raise ResourceExhausted(f"the thinker holds {self._in_flight} requests, its limit (max_num_seqs, or "
                                    "num_state_slots for Qwen3.5, + max_waiting_seqs); retry shortly or add a "
                                    "replica", retry_after_s=1.0)
        req = inp.request
        seq = Sequence(next(self._ids), inp.request_id, inp.token_ids, inp.sampling, self.eos_token_ids, req,
                       media_salts=tuple((m.offset, m.end, m.content_hash) for m in req.media),
                       # the talker needs hidden states of media rows: those must be computed, not reused
                       allow_prefix_cache=not req.capture_talker_states)
        self._in_flight += 1
        try:
            async for out in self._stream(seq, inp):
                yield out
        finally:
            self._in_flight -= 1

    async def _stream(self, seq: Sequence, inp: GenerateInput
                      ) -> AsyncIterator[TokensOut | ConditioningOut | FinishedOut]:
        """The sequence's tokens in batches, then its finish. The first batch goes at once; each later one with the
        first step that ends `flush_seconds` or more after the previous message (what the engine makes meanwhile
        travels together: docs/grpc-transport.md, ~40 us per message); the last with the sequence's end."""
        text = TextOutput(self.tokenizer, inp.sampling.stop_strings)
        sent_conditioning = not inp.request.capture_talker_states
        hold_until: float | None = None
        finish: FinishReason | None = None
        completion = 0
        first_token_at = conditioning_at = None  # monotonic, for the debug timeline
        async with self.engine.submit(seq.seq_id, seq, seq.request_id) as stream:
            while finish is None:
                events = await stream.take(hold_until, hold_grace=self.flush_seconds)
                finish = events[-1].finish_reason
                if not sent_conditioning and inp.request.talker_states_complete:
                    sent_conditioning = True
                    conditioning_at = time.monotonic()
                    yield ConditioningOut(inp.request.talker_conditioning())
                out, stopped = self._tokens_out(events, text, finish is not None)
                if self.flush_seconds > 0:
                    hold_until = stream.loop.time() + self.flush_seconds
                if out is not None:
                    completion += len(out.token_ids)
                    if first_token_at is None and out.token_ids:
                        first_token_at = time.monotonic()
                    yield out
                if stopped:
                    finish = FinishReason.STOP
        first = seq.first_scheduled_time or time.monotonic()
        self.metrics.get("omnimesh_queue_time_seconds").observe(first - seq.arrival_time)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request %s: %s", seq.request_id, _timeline(seq, first, conditioning_at, first_token_at,
                                                                  completion))
        yield FinishedOut(finish, seq.num_prompt_tokens, completion, seq.num_cached_prompt_tokens,
                          first - seq.arrival_time, time.monotonic() - first)

    @staticmethod
    def _tokens_out(events: list[TokenEvent], text: TextOutput, last: bool) -> tuple[TokensOut | None, bool]:
        """One batch of events as a message (None when it carries nothing), and whether a stop string matched."""
        tokens = [e for e in events if e.token_id is not None]  # an abort's end event carries no token
        ids = [e.token_id for e in tokens]
        # A sequence the engine stopped ends on its EOS or stop token id: reported, not shown as text.
        shown = ids[:-1] if events[-1].finish_reason is FinishReason.STOP and events[-1].token_id is not None else ids
        piece = text.feed(shown)
        body = piece.text + (text.finish() if last and not piece.stopped else "")
        if not tokens:
            return (TokensOut([], body) if body else None), piece.stopped
        logprobs = [(e.token_id, e.logprob, list(zip(e.top_ids or [], e.top_logprobs or [])))
                    for e in tokens if e.logprob is not None]
        return TokensOut(ids, body, logprobs), piece.stopped


def _timeline(seq: Sequence, first_scheduled: float, conditioning_at: float | None, first_token_at: float | None,
              tokens: int) -> str:
    """Where a request's time went (ms since it reached the engine), for a debug log: with the gateway's and the
    talker's timelines it says which stage a slow first audio or first token waited in."""
    since = lambda t: f"+{(t - seq.arrival_time) * 1e3:.1f} ms" if t is not None else "none"  # noqa: E731
    return (f"{seq.num_prompt_tokens} prompt tokens ({seq.num_cached_prompt_tokens} cached), first scheduled "
            f"{since(first_scheduled)}, talker conditioning {since(conditioning_at)}, first token "
            f"{since(first_token_at)}, end {since(time.monotonic())}; {tokens} tokens")
