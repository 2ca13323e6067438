"""Checks a Speak request's prompt, media spans and conditioning, and builds the SpeechPrompt the engine runs."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from omnimesh.v1 import thinker_pb2
from runtime.errors import InvalidArgument
from services.talker.model.config import TalkerConfig
from services.talker.model.mrope import VisualGrid
from services.talker.model.prompt import SpeechPrompt, assistant_start, user_turn_positions

IDS_FIELD = "start.prompt_token_ids"
CONDITIONING = "talker.media_hidden"
_KINDS = {thinker_pb2.MEDIA_KIND_IMAGE: "image", thinker_pb2.MEDIA_KIND_VIDEO: "video",
          thinker_pb2.MEDIA_KIND_AUDIO: "audio", thinker_pb2.MEDIA_KIND_AUDIO_IN_VIDEO: "audio_in_video"}


@dataclass(frozen=True)
class PromptLimits:
    cfg: TalkerConfig
    thinker_vocab: int  # rows of the thinker's embedding table: the ids the talker can look up
    max_prompt_tokens: int  # user-turn tokens one talker KV slot is sized for


@dataclass(frozen=True)
class CheckedPrompt:
    ids: list[int]
    media: list[thinker_pb2.MediaSpan]  # in prompt order
    media_positions: list[int]  # every placeholder index, in prompt order: the conditioning's rows
    user_positions: frozenset[int]


def check_prompt(ids: Sequence[int], spans: Sequence[thinker_pb2.MediaSpan], limits: PromptLimits) -> CheckedPrompt:
    cfg = limits.cfg
    ids = list(ids)
    if not ids:
        raise InvalidArgument(IDS_FIELD, "is empty; send the thinker's whole prompt")
    bad = next((t for t in ids if not 0 <= t < limits.thinker_vocab), None)
    if bad is not None:
        raise InvalidArgument(IDS_FIELD, f"holds {bad}, outside the thinker vocabulary [0, {limits.thinker_vocab})")
    try:
        a0 = assistant_start(ids, cfg)
    except InvalidArgument as err:
        raise InvalidArgument(IDS_FIELD, err.violations[0].description) from None
    if a0 + 3 > len(ids):
        raise InvalidArgument(IDS_FIELD, "the assistant header must be '<|im_start|>assistant\\n' (3 tokens)")
    users = user_turn_positions(ids, cfg)
    if len(users) > limits.max_prompt_tokens:
        raise InvalidArgument(IDS_FIELD, f"the user turns hold {len(users)} tokens; this talker takes at most "
                              f"{limits.max_prompt_tokens} (mesh.talker.speech.max_prompt_tokens)")
    positions: list[int] = []
    for i, span in enumerate(spans):
        positions.extend(_check_span(i, span, ids, cfg, positions[-1] + 1 if positions else 0))
    pads = {cfg.tokens.audio_pad, cfg.tokens.image_pad, cfg.tokens.video_pad}
    num_pads = sum(1 for t in ids if t in pads)
    if num_pads != len(positions):
        raise InvalidArgument("start.media", f"the spans cover {len(positions)} placeholders but the prompt holds "
                              f"{num_pads} audio/image/video placeholder tokens; send one span per media item")
    return CheckedPrompt(ids, list(spans), positions, frozenset(users))


def _check_span(i: int, span: thinker_pb2.MediaSpan, ids: list[int], cfg: TalkerConfig, after: int) -> range:
    field = f"start.media[{i}]"
    kind = _KINDS.get(span.kind)
    if kind is None:
        raise InvalidArgument(f"{field}.kind", "must be IMAGE, VIDEO, AUDIO or AUDIO_IN_VIDEO")
    end = span.offset + span.length
    if span.length == 0 or end > len(ids):
        raise InvalidArgument(field, f"span [{span.offset}, {end}) is empty or past the prompt's {len(ids)} tokens")
    if span.offset < after:
        raise InvalidArgument(f"{field}.offset", f"is {span.offset}; spans must be in prompt order without overlap "
                              f"(the previous one ends at {after})")
    if kind == "audio_in_video":
        pads = {cfg.tokens.video_pad, cfg.tokens.audio_pad}
        if set(ids[span.offset:end]) - pads:
            raise InvalidArgument(
                field, f"an audio-in-video span covers only video and audio placeholders {sorted(pads)}")
        if len(span.grid_thw) != 3:
            raise InvalidArgument(f"{field}.grid_thw", "must hold (t, h, w) for audio_in_video spans")
        return range(span.offset, end)
    pad = {"image": cfg.tokens.image_pad, "video": cfg.tokens.video_pad, "audio": cfg.tokens.audio_pad}[kind]
    if any(t != pad for t in ids[span.offset:end]):
        raise InvalidArgument(field, f"span must cover only {kind} placeholder tokens (id {pad})")
    if kind != "audio":
        merge = cfg.spatial_merge_size
        if len(span.grid_thw) != 3:
            raise InvalidArgument(f"{field}.grid_thw", f"must hold (t, h, w) for {kind} spans")
        t, h, w = span.grid_thw
        if h % merge or w % merge or t * h * w // merge**2 != span.length:
            raise InvalidArgument(f"{field}.grid_thw", f"{list(span.grid_thw)} merges ({merge}x{merge}) to "
                                  f"{t * h * w // merge**2} tokens, but the span has {span.length}")
        if kind == "video" and not span.second_per_grid > 0:
            raise InvalidArgument(f"{field}.second_per_grid", f"is {span.second_per_grid}; videos need a value > 0")
    return range(span.offset, end)


def check_conditioning(t: torch.Tensor, checked: CheckedPrompt, thinker_hidden: int) -> torch.Tensor:
    """The conditioning's rows of user-turn media, `[rows, thinker hidden]` float32; the rest is dropped here."""
    field = f"conditioning[{CONDITIONING}]"
    rows = len(checked.media_positions)
    if not t.is_floating_point():
        raise InvalidArgument(field, f"has dtype {t.dtype}; send the thinker's hidden states as floats")
    if rows == 0 and t.dim() == 2 and t.shape[0] == 0:
        return torch.empty(0, thinker_hidden)  # text only: the thinker sends [0, 0]
    if tuple(t.shape) != (rows, thinker_hidden):
        raise InvalidArgument(field, f"has shape {list(t.shape)}; expected [{rows}, {thinker_hidden}]: the thinker's "
                              f"hidden states at the prompt's {rows} media placeholders")
    keep = [k for k, pos in enumerate(checked.media_positions) if pos in checked.user_positions]
    return t[keep].float()


def speech_prompt(checked: CheckedPrompt, voice: str, media_hidden: torch.Tensor | None) -> SpeechPrompt:
    grids = {"image": [], "video": []}
    for span in checked.media:
        kind = _KINDS[span.kind]
        if kind != "audio":  # a video heard with its sound is still a video grid to the talker, as in the reference
            grids["image" if kind == "image" else "video"].append(
                VisualGrid(*span.grid_thw, seconds_per_grid=span.second_per_grid or 1.0))
    hidden = media_hidden if media_hidden is not None and media_hidden.shape[0] else None
    return SpeechPrompt(checked.ids, voice, hidden, tuple(grids["image"]), tuple(grids["video"]))
