"""SpeakStart's two SamplingParams -> one TalkerSampling and a frame limit, with config defaults and named errors."""
from __future__ import annotations

import math
from typing import NamedTuple

from omnimesh.v1 import common_pb2
from runtime.config import SpeechConfig
from runtime.errors import InvalidArgument
from services.talker.model.sampling import TalkerSampling

TALKER_FIELD = "start.talker_sampling"
PREDICTOR_FIELD = "start.code_predictor_sampling"
# What each message may set; anything else has no meaning for codec codes and is refused rather than ignored.
_TALKER_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty", "seed", "max_tokens")
_PREDICTOR_FIELDS = ("temperature", "top_k", "top_p")
_OPTIONAL = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed", "max_tokens",
             "presence_penalty", "frequency_penalty")


class SpeechSampling(NamedTuple):
    sampling: TalkerSampling
    max_frames: int


def resolve_speech_sampling(talker: common_pb2.SamplingParams, predictor: common_pb2.SamplingParams,
                            speech: SpeechConfig) -> SpeechSampling:
    """Unset fields take `speech`'s defaults. Temperature 0 is greedy; the code predictor follows the talker
    into greedy unless its own temperature is set (the reference samples both or neither)."""
    _refuse_unused(talker, _TALKER_FIELDS, TALKER_FIELD)
    _refuse_unused(predictor, _PREDICTOR_FIELDS, PREDICTOR_FIELD)
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
        _check(temp >= 0 and math.isfinite(temp), f"{field}.temperature",
               f"is {temp}; must be >= 0 (0 is greedy), not NaN or infinite")
        _check(top_k >= 0, f"{field}.top_k", f"is {top_k}; must be >= 0 (0 disables)")
        _check(0 < top_p <= 1, f"{field}.top_p", f"is {top_p}; must be in (0, 1]")
    _check(repetition > 0 and math.isfinite(repetition), f"{TALKER_FIELD}.repetition_penalty",
           f"is {repetition}; must be > 0 (1 disables), not NaN or infinite")
    _check(max_frames >= 1, f"{TALKER_FIELD}.max_tokens", f"is {max_frames}; must be >= 1 (codec frames)")
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


def _check(ok: bool, field: str, problem: str) -> None:
    if not ok:
        raise InvalidArgument(field, problem)


def _refuse_unused(pb: common_pb2.SamplingParams, allowed: tuple[str, ...], field: str) -> None:
    used = [n for n in _OPTIONAL if n not in allowed and pb.HasField(n)]
    used += [n for n in ("stop", "stop_token_ids") if getattr(pb, n)]
    used += [n for n in ("logprobs", "top_logprobs", "ignore_eos") if getattr(pb, n)]
    if used:
        raise InvalidArgument(f"{field}.{used[0]}", f"is not used by the talker; set only {', '.join(allowed)}")
