"""resolve_sampling: every validation branch names its field; defaults fill unset fields; seeds; sampling_to_pb."""
from __future__ import annotations

from typing import Any

import pytest

from omnimesh.v1 import common_pb2
from runtime.config import SamplingDefaults
from runtime.engine.sampler import MAX_TOP_LOGPROBS
from runtime.engine.sampling_params import SamplingOptions
from runtime.errors import InvalidArgument
from runtime.sampling import (MAX_STOP_CHARS, MAX_STOP_STRINGS, MAX_STOP_TOKEN_IDS, check_speech_sampling,
                              resolve_sampling, sampling_to_pb)

DEFAULTS = SamplingDefaults(temperature=0.5, top_k=7, top_p=0.75, min_p=0.125, repetition_penalty=1.5, max_tokens=99)
NAN = float("nan")


def resolve(**fields: Any) -> SamplingOptions:
    return resolve_sampling(common_pb2.SamplingParams(**fields), DEFAULTS)


@pytest.mark.parametrize(("fields", "name", "text"), [
    ({"temperature": -0.1}, "temperature", "must be >= 0"),
    ({"temperature": NAN}, "temperature", "must be >= 0"),
    ({"top_k": -1}, "top_k", "must be >= 0"),
    ({"top_p": 0.0}, "top_p", "must be in (0, 1]"),
    ({"top_p": 1.5}, "top_p", "must be in (0, 1]"),
    ({"top_p": NAN}, "top_p", "must be in (0, 1]"),
    ({"min_p": -0.5}, "min_p", "must be in [0, 1]"),
    ({"min_p": 1.5}, "min_p", "must be in [0, 1]"),
    ({"repetition_penalty": 0.0}, "repetition_penalty", "must be > 0"),
    ({"repetition_penalty": -1.0}, "repetition_penalty", "must be > 0"),
    ({"presence_penalty": 2.5}, "presence_penalty", "must be in [-2, 2]"),
    ({"presence_penalty": -2.5}, "presence_penalty", "must be in [-2, 2]"),
    ({"frequency_penalty": 3.0}, "frequency_penalty", "must be in [-2, 2]"),
    ({"frequency_penalty": -3.0}, "frequency_penalty", "must be in [-2, 2]"),
    ({"max_tokens": 0}, "max_tokens", "must be >= 1"),
    ({"top_logprobs": MAX_TOP_LOGPROBS + 1}, "top_logprobs", f"must be <= {MAX_TOP_LOGPROBS}"),
    ({"stop": ["x"] * (MAX_STOP_STRINGS + 1)}, "stop", f"at most {MAX_STOP_STRINGS}"),
    ({"stop": ["ok", ""]}, "stop", "empty string"),
    ({"stop_token_ids": [3, -1]}, "stop_token_ids", "negative id"),
])
def test_every_bad_field_is_named(fields: dict[str, Any], name: str, text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        resolve_sampling(common_pb2.SamplingParams(**fields), DEFAULTS, field="start.sampling")
    err = info.value
    assert err.grpc_code_name == "INVALID_ARGUMENT"
    assert [v.field for v in err.violations] == [f"start.sampling.{name}"]
    assert text in err.violations[0].description
    assert err.message.startswith(f"start.sampling.{name}: ")


def test_default_field_prefix_is_sampling() -> None:
    with pytest.raises(InvalidArgument) as info:
        resolve(top_k=-3)
    assert info.value.violations[0].field == "sampling.top_k"


@pytest.mark.parametrize("fields", [
    {"temperature": 0.0}, {"top_k": 0}, {"top_p": 1.0}, {"min_p": 0.0}, {"min_p": 1.0},
    {"repetition_penalty": 1e-3}, {"presence_penalty": -2.0}, {"presence_penalty": 2.0},
    {"frequency_penalty": -2.0}, {"frequency_penalty": 2.0}, {"max_tokens": 1},
    {"top_logprobs": MAX_TOP_LOGPROBS}, {"stop": ["s"] * MAX_STOP_STRINGS}, {"stop_token_ids": [0]},
])
def test_edge_values_are_accepted(fields: dict[str, Any]) -> None:
    resolve(**fields)


def test_unset_fields_take_the_defaults() -> None:
    opts = resolve()
    assert opts.temperature == 0.5 and opts.top_k == 7 and opts.top_p == 0.75 and opts.min_p == 0.125
    assert opts.repetition_penalty == 1.5 and opts.max_tokens == 99
    assert opts.presence_penalty == 0.0 and opts.frequency_penalty == 0.0
    assert opts.stop_token_ids == frozenset() and opts.stop_strings == ()
    assert not opts.ignore_eos and not opts.logprobs and opts.top_logprobs == 0


def test_explicit_zeros_are_not_defaults() -> None:
    # proto3 `optional`: an explicit 0 is a choice (greedy, top-k off), not "unset".
    opts = resolve(temperature=0.0, top_k=0, min_p=0.0, presence_penalty=0.0)
    assert opts.temperature == 0.0 and opts.is_greedy and opts.top_k == 0 and opts.min_p == 0.0


def test_set_fields_win_over_defaults() -> None:
    opts = resolve(temperature=1.25, top_k=3, top_p=0.5, min_p=0.25, repetition_penalty=1.0, presence_penalty=0.5,
                   frequency_penalty=-0.5, max_tokens=12, stop=["END", "\n\n"], stop_token_ids=[5, 3, 5],
                   ignore_eos=True, seed=42)
    assert (opts.temperature, opts.top_k, opts.top_p, opts.min_p) == (1.25, 3, 0.5, 0.25)
    assert (opts.repetition_penalty, opts.presence_penalty, opts.frequency_penalty) == (1.0, 0.5, -0.5)
    assert opts.max_tokens == 12 and opts.stop_strings == ("END", "\n\n") and opts.stop_token_ids == {3, 5}
    assert opts.ignore_eos and opts.seed == 42


def test_an_unset_seed_gets_a_fresh_one_per_request() -> None:
    seeds = {resolve().seed for _ in range(20)}
    assert len(seeds) == 20
    assert all(0 <= s < 2**63 for s in seeds)


@pytest.mark.parametrize("seed", [0, 1, 2**63, 2**64 - 1])
def test_a_set_seed_is_kept_even_zero(seed: int) -> None:
    assert resolve(seed=seed).seed == seed


def test_top_logprobs_turn_logprobs_on() -> None:
    assert resolve(top_logprobs=3).logprobs and resolve(top_logprobs=3).top_logprobs == 3
    assert resolve(logprobs=True).logprobs and resolve(logprobs=True).top_logprobs == 0


def test_max_tokens_cap() -> None:
    pb = common_pb2.SamplingParams(max_tokens=500)
    assert resolve_sampling(pb, DEFAULTS, max_tokens_cap=100).max_tokens == 100
    assert resolve_sampling(pb, DEFAULTS, max_tokens_cap=1000).max_tokens == 500
    assert resolve_sampling(common_pb2.SamplingParams(), DEFAULTS, max_tokens_cap=10).max_tokens == 10


def test_sampling_to_pb_sets_every_field_and_round_trips() -> None:
    opts = resolve(temperature=0.25, top_k=4, presence_penalty=0.5, stop=["a"], stop_token_ids=[9, 2], logprobs=True,
                   top_logprobs=2, ignore_eos=True)
    pb = sampling_to_pb(opts)
    for name in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "seed", "max_tokens"):
        assert pb.HasField(name), name
    assert list(pb.stop_token_ids) == [2, 9]
    # A next stage resolving with entirely different defaults samples exactly the same way, seed included.
    other = SamplingDefaults(temperature=1.0, top_k=0, top_p=1.0, max_tokens=3)
    again = resolve_sampling(common_pb2.SamplingParams.FromString(pb.SerializeToString()), other)
    assert again == opts


def test_sampling_to_pb_round_trips_greedy_defaults() -> None:
    opts = resolve(temperature=0.0)
    assert resolve_sampling(sampling_to_pb(opts), SamplingDefaults()) == opts


INF = float("inf")


@pytest.mark.parametrize(("fields", "name"), [
    ({"temperature": INF}, "temperature"),
    ({"repetition_penalty": INF}, "repetition_penalty"),
    ({"repetition_penalty": NAN}, "repetition_penalty"),
    ({"top_p": INF}, "top_p"),
    ({"min_p": NAN}, "min_p"),
    ({"presence_penalty": -INF}, "presence_penalty"),
    ({"frequency_penalty": NAN}, "frequency_penalty"),
])
def test_nan_and_infinities_are_refused(fields: dict[str, Any], name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        resolve(**fields)
    assert [v.field for v in info.value.violations] == [f"sampling.{name}"]


def test_stop_strings_and_ids_are_capped() -> None:
    with pytest.raises(InvalidArgument, match=f"holds a string of {MAX_STOP_CHARS + 1} characters; at most "
                                              f"{MAX_STOP_CHARS} each"):
        resolve(stop=["ok", "s" * (MAX_STOP_CHARS + 1)])
    with pytest.raises(InvalidArgument, match=f"has {MAX_STOP_TOKEN_IDS + 1} ids; at most {MAX_STOP_TOKEN_IDS}"):
        resolve(stop_token_ids=[1] * (MAX_STOP_TOKEN_IDS + 1))
    assert resolve(stop=["s" * MAX_STOP_CHARS]).stop_strings == ("s" * MAX_STOP_CHARS,)


@pytest.mark.parametrize(("fields", "name", "text"), [
    ({"temperature": -1.0}, "temperature", "must be >= 0"),
    ({"temperature": INF}, "temperature", "not NaN or infinite"),
    ({"top_k": -1}, "top_k", "must be >= 0"),
    ({"top_p": 0.0}, "top_p", "must be in (0, 1]"),
    ({"top_p": NAN}, "top_p", "must be in (0, 1]"),
    ({"repetition_penalty": NAN}, "repetition_penalty", "not NaN or infinite"),
    ({"max_tokens": 0}, "max_tokens", "must be >= 1"),
    ({"min_p": 0.1}, "min_p", "is not used by the talker"),
    ({"stop": ["x"]}, "stop", "is not used by the talker"),
    ({"ignore_eos": True}, "ignore_eos", "is not used by the talker"),
])
def test_speech_sampling_fields_are_checked_where_they_arrive(fields: dict[str, Any], name: str, text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_speech_sampling(common_pb2.SamplingParams(**fields))
    assert [v.field for v in info.value.violations] == [f"speech_sampling.{name}"]
    assert text in info.value.violations[0].description


def test_speech_sampling_unset_and_in_range_passes() -> None:
    check_speech_sampling(common_pb2.SamplingParams())
    check_speech_sampling(common_pb2.SamplingParams(temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.05,
                                                    seed=0, max_tokens=1))
