"""SamplingParams (wire) -> SamplingOptions (engine), with defaults and a named error for every bad field."""
from __future__ import annotations

import secrets

from omnimesh.v1 import common_pb2
from runtime.config import SamplingDefaults
from runtime.engine.sampling_params import SamplingOptions
from runtime.engine.sampler import MAX_TOP_LOGPROBS
from runtime.errors import InvalidArgument

MAX_STOP_STRINGS = 16


def resolve_sampling(pb: common_pb2.SamplingParams, defaults: SamplingDefaults, field: str = "sampling",
                     max_tokens_cap: int | None = None) -> SamplingOptions:
    """Validates `pb`, fills unset fields from `defaults`, and gives a request without a seed a fresh one."""

    def get(name: str, default: float) -> float:
        return getattr(pb, name) if pb.HasField(name) else default

    temperature = get("temperature", defaults.temperature)
    top_k = int(get("top_k", defaults.top_k))
    top_p = get("top_p", defaults.top_p)
    min_p = get("min_p", defaults.min_p)
    repetition = get("repetition_penalty", defaults.repetition_penalty)
    presence = get("presence_penalty", 0.0)
    frequency = get("frequency_penalty", 0.0)
    max_tokens = int(get("max_tokens", defaults.max_tokens))
    checks = [
        (temperature >= 0 and temperature == temperature, "temperature",  # NaN != NaN
         f"is {temperature}; must be >= 0 (0 is greedy)"),
        (top_k >= 0, "top_k", f"is {top_k}; must be >= 0 (0 disables)"),
        (0 < top_p <= 1, "top_p", f"is {top_p}; must be in (0, 1]"),
        (0 <= min_p <= 1, "min_p", f"is {min_p}; must be in [0, 1]"),
        (repetition > 0, "repetition_penalty", f"is {repetition}; must be > 0 (1 disables)"),
        (-2 <= presence <= 2, "presence_penalty", f"is {presence}; must be in [-2, 2]"),
        (-2 <= frequency <= 2, "frequency_penalty", f"is {frequency}; must be in [-2, 2]"),
        (max_tokens >= 1, "max_tokens", f"is {max_tokens}; must be >= 1"),
        (pb.top_logprobs <= MAX_TOP_LOGPROBS, "top_logprobs", f"is {pb.top_logprobs}; must be <= {MAX_TOP_LOGPROBS}"),
        (len(pb.stop) <= MAX_STOP_STRINGS, "stop", f"has {len(pb.stop)} strings; at most {MAX_STOP_STRINGS}"),
        (all(pb.stop), "stop", "holds an empty string; stop strings must be non-empty"),
        (all(t >= 0 for t in pb.stop_token_ids), "stop_token_ids", "holds a negative id"),
    ]
    for ok, name, problem in checks:
        if not ok:
            raise InvalidArgument(f"{field}.{name}", problem)
    if max_tokens_cap is not None:
        max_tokens = min(max_tokens, max_tokens_cap)
    return SamplingOptions(
        temperature=float(temperature), top_k=top_k, top_p=float(top_p), min_p=float(min_p),
        repetition_penalty=float(repetition), presence_penalty=float(presence), frequency_penalty=float(frequency),
        seed=int(pb.seed) if pb.HasField("seed") else secrets.randbits(63),
        max_tokens=max_tokens, stop_token_ids=frozenset(pb.stop_token_ids), stop_strings=tuple(pb.stop),
        ignore_eos=pb.ignore_eos, logprobs=pb.logprobs or pb.top_logprobs > 0, top_logprobs=int(pb.top_logprobs),
    )


def sampling_to_pb(opts: SamplingOptions) -> common_pb2.SamplingParams:
    """Every field set explicitly, so the next stage samples exactly as resolved here (seed included)."""
    return common_pb2.SamplingParams(
        temperature=opts.temperature, top_k=opts.top_k, top_p=opts.top_p, min_p=opts.min_p,
        repetition_penalty=opts.repetition_penalty, presence_penalty=opts.presence_penalty,
        frequency_penalty=opts.frequency_penalty, seed=opts.seed, max_tokens=opts.max_tokens,
        stop=list(opts.stop_strings), stop_token_ids=sorted(opts.stop_token_ids), ignore_eos=opts.ignore_eos,
        logprobs=opts.logprobs, top_logprobs=opts.top_logprobs)
