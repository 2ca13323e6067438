"""SamplingParams (wire) -> SamplingOptions (engine), with defaults and a named error for every bad field."""
from __future__ import annotations

import secrets

from omnimesh.v1 import common_pb2
from runtime.config import SamplingDefaults
from runtime.engine.sampling_params import RULES, SamplingOptions
from runtime.engine.sampler import MAX_TOP_LOGPROBS
from runtime.errors import InvalidArgument

MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256  # of each stop string: every delta is searched for each, over the longest's length
MAX_STOP_TOKEN_IDS = 256
# What a request's speech_sampling may set; anything else has no meaning for codec codes and is refused.
SPEECH_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty", "seed", "max_tokens")
_OPTIONAL = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed", "max_tokens",
             "presence_penalty", "frequency_penalty")


def check_value(field: str, name: str, value: float, note: str = "") -> None:
    """Raises InvalidArgument naming `field.name` when `value` breaks `RULES[name]` (`note`: what the unit is)."""
    rule = RULES[name]
    if not rule.ok(value):
        raise InvalidArgument(f"{field}.{name}", f"is {value}; {rule.allowed}{note}")


def refuse_unused(pb: common_pb2.SamplingParams, allowed: tuple[str, ...], field: str) -> None:
    """The talker's sampling messages set only `allowed`: anything else has no meaning for codec codes and is
    refused rather than ignored."""
    unused = [n for n in _OPTIONAL if n not in allowed and pb.HasField(n)]
    unused += [n for n in ("stop", "stop_token_ids", "logprobs", "top_logprobs", "ignore_eos") if getattr(pb, n)]
    if unused:
        raise InvalidArgument(f"{field}.{unused[0]}", f"is not used by the talker; set only {', '.join(allowed)}")


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
    for name, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("min_p", min_p),
                        ("repetition_penalty", repetition), ("presence_penalty", presence),
                        ("frequency_penalty", frequency), ("max_tokens", max_tokens)):
        check_value(field, name, value)
    checks = [
        (pb.top_logprobs <= MAX_TOP_LOGPROBS, "top_logprobs", f"is {pb.top_logprobs}; must be <= {MAX_TOP_LOGPROBS}"),
        (len(pb.stop) <= MAX_STOP_STRINGS, "stop", f"has {len(pb.stop)} strings; at most {MAX_STOP_STRINGS}"),
        (all(pb.stop), "stop", "holds an empty string; stop strings must be non-empty"),
        (all(len(s) <= MAX_STOP_CHARS for s in pb.stop), "stop",
         f"holds a string of {max(map(len, pb.stop), default=0)} characters; at most {MAX_STOP_CHARS} each"),
        (len(pb.stop_token_ids) <= MAX_STOP_TOKEN_IDS, "stop_token_ids",
         f"has {len(pb.stop_token_ids)} ids; at most {MAX_STOP_TOKEN_IDS}"),
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


def check_speech_sampling(pb: common_pb2.SamplingParams, field: str = "speech_sampling") -> None:
    """The fields a request sets on its speech's sampling, checked where it arrives, before any stream opens; unset
    fields take the talker's defaults (its config), which the talker checks itself."""
    refuse_unused(pb, SPEECH_FIELDS, field)
    for name in SPEECH_FIELDS:
        if name != "seed" and pb.HasField(name):
            check_value(field, name, getattr(pb, name), " (codec frames)" if name == "max_tokens" else "")


def sampling_to_pb(opts: SamplingOptions) -> common_pb2.SamplingParams:
    """Every field set explicitly, so the next stage samples exactly as resolved here (seed included)."""
    return common_pb2.SamplingParams(
        temperature=opts.temperature, top_k=opts.top_k, top_p=opts.top_p, min_p=opts.min_p,
        repetition_penalty=opts.repetition_penalty, presence_penalty=opts.presence_penalty,
        frequency_penalty=opts.frequency_penalty, seed=opts.seed, max_tokens=opts.max_tokens,
        stop=list(opts.stop_strings), stop_token_ids=sorted(opts.stop_token_ids), ignore_eos=opts.ignore_eos,
        logprobs=opts.logprobs, top_logprobs=opts.top_logprobs)
