"""The talker's prefill: user turns (text embeddings, media hidden states) + the 9-position assistant preamble."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from runtime.errors import InvalidArgument
from services.talker.model.config import TalkerConfig
from services.talker.model.load import TalkerModel
from services.talker.model.mrope import VisualGrid, talker_positions

ASSISTANT_PREAMBLE = 9  # <|im_start|> assistant \n, 4 codec control slots, codec pad, first text + codec bos


@dataclass(frozen=True)
class SpeechPrompt:
    """What the talker gets once per request (all prompt-length data; afterwards only token ids arrive).

    `media_hidden` holds the thinker's layer-`accept_hidden_layer` hidden states at the media pad positions
    (audio/image/video) of the *user* turns, in prompt order. `images`/`videos` are every image/video grid of
    the prompt in order (they only shape M-RoPE positions).
    """

    prompt_ids: Sequence[int]
    voice: str = "ethan"
    media_hidden: torch.Tensor | None = None  # (M, thinker hidden)
    images: tuple[VisualGrid, ...] = field(default=())
    videos: tuple[VisualGrid, ...] = field(default=())


@dataclass(frozen=True)
class Prefill:
    embeds: torch.Tensor  # (L, talker hidden)
    positions: torch.Tensor  # (3, L) float32 M-RoPE positions
    next_position: float  # M-RoPE position of the first decode step (same on all three axes)
    pending_text: list[int]  # thinker ids after the first assistant text token that the prompt already holds


def user_turn_positions(ids: Sequence[int], cfg: TalkerConfig) -> list[int]:
    """Indices of tokens in user turns: a token's role is the token after the latest `<|im_start|>` up to it."""
    tok, out, role_at = cfg.tokens, [], 0
    for i, token in enumerate(ids):
        if token == tok.im_start:
            role_at = i
        if ids[min(role_at + 1, len(ids) - 1)] == tok.user:
            out.append(i)
    return out


def assistant_start(ids: Sequence[int], cfg: TalkerConfig) -> int:
    """Index of the last `<|im_start|>assistant`."""
    tok = cfg.tokens
    for i in range(len(ids) - 2, -1, -1):
        if ids[i] == tok.im_start and ids[i + 1] == tok.assistant:
            return i
    raise InvalidArgument("prompt_ids", "no '<|im_start|>assistant' turn header; the talker speaks the assistant turn")


def _user_part(model: TalkerModel, prompt: SpeechPrompt, users: list[int]) -> torch.Tensor:
    """(U, hidden): `hidden_projection` of the thinker's hidden state at media pads, `text_projection` elsewhere."""
    tok, ids = model.cfg.tokens, list(prompt.prompt_ids)
    media_pads = {tok.audio_pad, tok.image_pad, tok.video_pad}
    is_media = torch.tensor([ids[i] in media_pads for i in users], dtype=torch.bool, device=model.device)
    n_media = int(is_media.sum())
    given = 0 if prompt.media_hidden is None else prompt.media_hidden.shape[0]
    if given != n_media:
        raise InvalidArgument(
            "media_hidden", f"has {given} rows but the user turns hold {n_media} audio/image/video pad tokens"
        )
    user_ids = torch.tensor([ids[i] for i in users], dtype=torch.long, device=model.device)
    out = torch.empty(len(users), model.cfg.lm.hidden_size, device=model.device, dtype=model.dtype)
    out[~is_media] = model.text_embeds(user_ids[~is_media])
    if n_media:
        out[is_media] = model.lm.hidden_projection(prompt.media_hidden.to(model.device, model.dtype))
    return out


def _assistant_part(model: TalkerModel, header: list[int], first_text: int, speaker: int) -> torch.Tensor:
    """(9, hidden): text side [A0 A1 A2 P P P P B A3] + codec side [0 0 0 nothink think_bos think_eos spk pad bos]."""
    tok = model.cfg.tokens
    text_ids = header + [tok.tts_pad] * 4 + [tok.tts_bos, first_text]
    text = model.text_embeds(torch.tensor(text_ids, device=model.device))
    codec_ids = [tok.codec_nothink, tok.codec_think_bos, tok.codec_think_eos, speaker, tok.codec_pad, tok.codec_bos]
    codec = model.lm.codec_embedding(torch.tensor(codec_ids, device=model.device))
    return torch.cat((text[:3], text[3:] + codec))


def build_prefill(model: TalkerModel, prompt: SpeechPrompt, first_text: int) -> Prefill:
    """The talker prompt for `prompt`, whose assistant text starts with thinker id `first_text`.

    `first_text` is the thinker's first generated token (or `tts_eos` when it wrote nothing); if the prompt
    itself already holds assistant text after `<|im_start|>assistant\\n`, that text comes first and the rest
    is returned in `pending_text` to be fed before the generated tokens.
    """
    cfg, ids = model.cfg, list(prompt.prompt_ids)
    speaker = cfg.speaker_codec_id(prompt.voice)
    users = user_turn_positions(ids, cfg)
    a0 = assistant_start(ids, cfg)
    header, text = ids[a0 : a0 + 3], ids[a0 + 3 :] + [first_text]
    if len(header) < 3:
        raise InvalidArgument("prompt_ids", "the assistant header must be '<|im_start|>assistant\\n' (3 tokens)")
    embeds = torch.cat((_user_part(model, prompt, users), _assistant_part(model, header, text[0], speaker)))
    talker_ids = [ids[i] for i in users] + [cfg.tokens.tts_pad] * ASSISTANT_PREAMBLE
    positions = talker_positions(
        talker_ids, cfg.tokens, prompt.images, prompt.videos, cfg.spatial_merge_size, cfg.position_id_per_seconds
    )
    next_position = float(positions[:, -1].max()) + 1  # the prompt always ends in text, so its last is its max
    return Prefill(embeds, positions.to(model.device), next_position, text[1:])


def trailing_text(model: TalkerModel, token_ids: torch.Tensor) -> torch.Tensor:
    """The text half of each row's next talker input `(B, hidden)` from the thinker id it speaks this step.

    That id is the assistant's next text token, `tts_eos` right after the thinker's end of turn, and
    `tts_pad` from then on (TalkerState's queue decides which); only ids cross the wire per step.
    """
    return model.text_embeds(token_ids)
