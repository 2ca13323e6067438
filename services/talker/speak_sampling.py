"""SpeakStart's two SamplingParams -> one TalkerSampling and a frame limit, with config defaults and named errors."""
from __future__ import annotations

from typing import NamedTuple

from omnimesh.v1 import common_pb2
from runtime.config import SpeechConfig
from runtime.sampling import check_value, refuse_unused
from services.talker.model.sampling import TalkerSampling

TALKER_FIELD = "start.talker_sampling"
PREDICTOR_FIELD = "start.code_predictor_sampling"
# What each message may set; anything else has no meaning for codec codes and is refused rather than ignored.
_TALKER_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty", "seed", "max_tokens")
_PREDICTOR_FIELDS = ("temperature", "top_k", "top_p")


class SpeechSampling(NamedTuple):
    sampling: TalkerSampling
    max_frames: int


def resolve_speech_sampling(talker: common_pb2.SamplingParams, predictor: common_pb2.SamplingParams,
                            speech: SpeechConfig) -> SpeechSampling:
    """Unset fields take `speech`'s defaults. Temperature 0 is greedy; the code predictor follows the talker
    into greedy unless its own temperature is set (the reference samples both or neither)."""
    refuse_unused(talker, _TALKER_FIELDS, TALKER_FIELD)
    refuse_unused(predictor, _PREDICTOR_FIELDS, PREDICTOR_FIELD)
    t_temp = _get(talker, "temperature", speech.temperature)
    t_top_k = int(_get(talker, "top_k", speech.top_k))
    t_top_p = _get(talker, "top_p", speech.top_p)
    repetition = _get(talker, "repetition_penalty", speech.repetition_penalty)
    max_frames = int(_get(talker, "max_tokens", speech.max_frames))
    p_temp = _get(predictor, "temperature", 0.0 if t_temp == 0 else speech.predictor_temperature)
    p_top_k = int(_get(predictor, "top_k", speech.predictor_top_k))
    p_top_p = _get(predictor, "top_p", speech.predictor_top_p)
    sides = ((TALKER_FIELD, t_temp, t_top_k, t_top_p), (PREDICTOR_FIELD, p_temp, p_top_k, p_top_p))
    for field, temp, top_k, top_p in sides:
        check_value(field, "temperature", temp)
        check_value(field, "top_k", top_k)
        check_value(field, "top_p", top_p)
    check_value(TALKER_FIELD, "repetition_penalty", repetition)
    check_value(TALKER_FIELD, "max_tokens", max_frames, " (codec frames)")
    seed = int(talker.seed) if talker.HasField("seed") else None  # None: the runner draws a fresh one
    if t_temp == 0 and p_temp == 0:
        sampling = TalkerSampling(do_sample=False, repetition_penalty=repetition)
    else:
        # one greedy side inside a sampled request: top-k 1 keeps only the best code, whatever the draw
        sampling = TalkerSampling(
            do_sample=True, temperature=t_temp or 1.0, top_k=t_top_k if t_temp else 1, top_p=t_top_p,
            repetition_penalty=repetition, predictor_temperature=p_temp or 1.0,
            predictor_top_k=p_top_k if p_temp else 1, predictor_top_p=p_top_p, seed=seed)
    return SpeechSampling(sampling, min(max_frames, speech.max_frames))


def _get(pb: common_pb2.SamplingParams, name: str, default: float) -> float:
    return getattr(pb, name) if pb.HasField(name) else default
