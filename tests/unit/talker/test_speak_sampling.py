"""Speak sampling: config defaults for unset fields, greedy at temperature 0 (the predictor follows), named errors."""
from __future__ import annotations

import pytest

from omnimesh.v1 import common_pb2
from runtime.config import SpeechConfig
from runtime.errors import InvalidArgument
from services.talker.model.sampling import TalkerSampling
from services.talker.speak_sampling import resolve_speech_sampling

P = common_pb2.SamplingParams
CFG = SpeechConfig(max_frames=100)


def test_unset_fields_take_the_config_defaults() -> None:
    got = resolve_speech_sampling(P(), P(), CFG)
    assert got.sampling == TalkerSampling() and got.max_frames == 100


def test_overrides_seed_and_frame_cap() -> None:
    # values a float32 field holds exactly
    got = resolve_speech_sampling(P(temperature=0.5, top_k=7, top_p=0.75, repetition_penalty=1.25, seed=9,
                                    max_tokens=500), P(temperature=0.75, top_k=3, top_p=0.5), CFG)
    assert got.sampling == TalkerSampling(True, 0.5, 7, 0.75, 1.25, 0.75, 3, 0.5, seed=9)
    assert got.max_frames == 100  # capped at the config's max_frames
    assert resolve_speech_sampling(P(max_tokens=5), P(), CFG).max_frames == 5


def test_greedy_talker_makes_the_predictor_greedy_unless_it_says_otherwise() -> None:
    greedy = resolve_speech_sampling(P(temperature=0), P(), CFG).sampling
    assert not greedy.do_sample and greedy.repetition_penalty == CFG.repetition_penalty
    mixed = resolve_speech_sampling(P(temperature=0), P(temperature=1.0), CFG).sampling
    assert mixed.do_sample and mixed.top_k == 1 and mixed.predictor_top_k == CFG.predictor_top_k
    predictor_greedy = resolve_speech_sampling(P(), P(temperature=0), CFG).sampling
    assert predictor_greedy.do_sample and predictor_greedy.predictor_top_k == 1 and predictor_greedy.top_k == 50


@pytest.mark.parametrize(("talker", "predictor", "field"), [
    (P(temperature=-1), P(), "start.talker_sampling.temperature"),
    (P(temperature=float("nan")), P(), "start.talker_sampling.temperature"),
    (P(temperature=float("inf")), P(), "start.talker_sampling.temperature"),
    (P(), P(temperature=float("inf")), "start.code_predictor_sampling.temperature"),
    (P(repetition_penalty=float("inf")), P(), "start.talker_sampling.repetition_penalty"),
    (P(top_k=-1), P(), "start.talker_sampling.top_k"),
    (P(top_p=0), P(), "start.talker_sampling.top_p"),
    (P(repetition_penalty=0), P(), "start.talker_sampling.repetition_penalty"),
    (P(max_tokens=0), P(), "start.talker_sampling.max_tokens"),
    (P(), P(top_p=1.5), "start.code_predictor_sampling.top_p"),
    (P(min_p=0.1), P(), "start.talker_sampling.min_p"),
    (P(logprobs=True), P(), "start.talker_sampling.logprobs"),
    (P(stop_token_ids=[3]), P(), "start.talker_sampling.stop_token_ids"),
    (P(), P(repetition_penalty=1.1), "start.code_predictor_sampling.repetition_penalty"),
    (P(), P(max_tokens=4), "start.code_predictor_sampling.max_tokens"),
])
def test_bad_fields_are_named(talker: common_pb2.SamplingParams, predictor: common_pb2.SamplingParams,
                              field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        resolve_speech_sampling(talker, predictor, CFG)
    assert caught.value.violations[0].field == field
