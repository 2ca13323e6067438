"""The text->text workload (fixed prompt and output lengths) and what a closed-loop run reports from its records."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.chat_template import ChatMessage, TextPart, build_prompt_ids
from runtime.tokenizer import Tokenizer
from runtime.chat_template import load_chat_template
from omnimesh.timing import timing_percentiles, trailer_timing

# Words that are one token each with a leading space in the Qwen BPE, so a prompt's length is exact.
WORDS = ("apple", "river", "stone", "music", "light", "paper", "green", "house", "water", "cloud", "table", "night",
         "horse", "glass", "train", "bread", "storm", "field", "chair", "dream", "plant", "smile", "ocean", "metal",
         "story", "world", "sound", "heart", "north", "south", "winter", "summer", "garden", "silver", "forest",
         "window", "market", "letter", "doctor", "island")


@dataclass(frozen=True)
class Prompt:
    text: str  # the user message the gateway receives
    token_ids: list[int]  # what the chat template makes of it (engine-only runs submit these)


def ordinary_tokens(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """Token ids that are a space and a word of letters (any script) and that the tokenizer gives back alone for that
    text: words drawn from them never merge, so a prompt's length is exact. -> (all of them, those that are also
    one token without the space: a message's first word has none)."""
    spaced, bare = [], []
    for tid in range(tokenizer.vocab_size):
        text = tokenizer.decode([tid])
        if len(text) < 3 or text[0] != " " or not text[1:].isalpha():
            continue
        if tokenizer.encode(text, allow_special=False) == [tid]:
            spaced.append(tid)
            if len(tokenizer.encode(text[1:], allow_special=False)) == 1:
                bare.append(tid)
    return spaced, bare


class PromptMaker:
    """Prompts of exactly `num_tokens` template tokens, distinct from their first user word (no prefix-cache hits).

    routing "balanced": words drawn over the tokenizer's ordinary tokens, as diverse as real text is to a trained
    router; "native": words from the 40 of WORDS (the earlier workload, whose rows share most experts)."""

    def __init__(self, model_dir: Path, num_tokens: int, routing: str = "balanced") -> None:
        self.tokenizer = Tokenizer.from_dir(model_dir)
        self.template = load_chat_template(model_dir)
        if routing == "balanced":
            spaced, bare = _ordinary_tokens_cached(model_dir, self.tokenizer)
            self.words = [self.tokenizer.decode([t])[1:] for t in spaced]
            self.first_words = [self.tokenizer.decode([t])[1:] for t in bare]
        else:
            # one token with and without the leading space: the first word of the message has none
            self.words = [w for w in WORDS
                          if len(self.tokenizer.encode(" " + w)) == len(self.tokenizer.encode(w)) == 1]
            self.first_words = self.words
        overhead = len(self._ids(""))
        if num_tokens <= overhead:
            raise ValueError(f"prompt of {num_tokens} tokens: the chat template alone takes {overhead}")
        self.num_words = num_tokens - overhead
        self.num_tokens = num_tokens

    def _ids(self, text: str) -> list[int]:
        return build_prompt_ids(self.tokenizer, self.template, [ChatMessage("user", [TextPart(text)])], []).ids

    def make(self, index: int) -> Prompt:
        first = self.first_words[index % len(self.first_words)]
        for attempt in range(20):  # words never merge across spaces in this BPE; the retry is a safety net
            rng = random.Random(index * 1000 + attempt)
            words = [first] + [rng.choice(self.words) for _ in range(self.num_words - 1)]
            text = " ".join(words)
            ids = self._ids(text)
            if len(ids) == self.num_tokens:
                return Prompt(text, ids)
        raise ValueError(f"could not make prompt {index} of exactly {self.num_tokens} tokens (got {len(ids)})")


_POOLS: dict[Path, tuple[list[int], list[int]]] = {}


def _ordinary_tokens_cached(model_dir: Path, tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    if model_dir not in _POOLS:  # ~150k decodes: once per run, not per prompt length
        _POOLS[model_dir] = ordinary_tokens(tokenizer)
    return _POOLS[model_dir]


@dataclass
class RequestRecord:
    index: int
    start: float
    measured: bool
    first: float | None = None
    end: float | None = None
    tokens: int = 0
    token_times: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens in that event)
    timing: dict[str, float] | None = None  # the gateway's ms by phase and stage (gateway/timeline.py)

    def add(self, now: float, count: int) -> None:
        if count <= 0:
            return
        if self.first is None:
            self.first = now
        self.tokens += count
        self.token_times.append((now, count))


async def read_timing(call: Any, rec: RequestRecord) -> None:
    """The `omnimesh-timing` trailer of a finished gateway call into its record."""
    rec.timing = trailer_timing(await call.trailing_metadata()) or None


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(records: list[RequestRecord], concurrency: int) -> dict[str, Any]:
    """Output tok/s over the measured window (first measured start -> last measured end, every token that arrived
    in it, warm-up tails and load-keeping extras included), TTFT and TPOT from the measured requests only, and the
    gateway's timing of them by phase where it sent one."""
    measured = [r for r in records if r.measured and r.end is not None]
    if not measured:
        return {"concurrency": concurrency, "requests": 0}
    t0 = min(r.start for r in measured)
    t1 = max(r.end for r in measured)
    tokens = sum(n for r in records for t, n in r.token_times if t0 <= t <= t1)
    ttft = [r.first - r.start for r in measured if r.first is not None]
    tpot = [(r.end - r.first) / (r.tokens - 1) for r in measured if r.first is not None and r.tokens > 1]
    ms = 1e3
    return {
        "concurrency": concurrency,
        "requests": len(measured),
        "window_s": t1 - t0,
        "output_tokens": tokens,
        "output_tok_s": tokens / (t1 - t0) if t1 > t0 else None,
        "ttft_ms_p50": _scale(percentile(ttft, 50), ms), "ttft_ms_p99": _scale(percentile(ttft, 99), ms),
        "tpot_ms_p50": _scale(percentile(tpot, 50), ms), "tpot_ms_p99": _scale(percentile(tpot, 99), ms),
        "tokens_per_request": sorted({r.tokens for r in measured}),
        "gateway_timing_ms": timing_percentiles(r.timing for r in measured),
        "raw": [{"ttft_ms": _scale(r.first - r.start, ms) if r.first else None,
                 "e2e_ms": (r.end - r.start) * ms, "tokens": r.tokens, "gateway_timing_ms": r.timing}
                for r in measured],
    }


def _scale(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor
