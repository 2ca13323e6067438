"""The talker prefill layout: user turns only, the 9-position assistant preamble, media rows, and input errors."""
from __future__ import annotations

import pytest
import torch

from runtime.checkpoint import token_ids as T
from runtime.errors import InvalidArgument
from services.talker.model.load import TalkerModel
from services.talker.model.prompt import SpeechPrompt, build_prefill, user_turn_positions
from tests.unit.talker.talker_tiny import tiny_config, tiny_talker

SYSTEM = [T.IM_START, T.SYSTEM, T.NEWLINE, 5, T.IM_END, T.NEWLINE]
USER = [T.IM_START, T.USER, T.NEWLINE, 6, T.AUDIO_START, T.AUDIO_PAD, T.AUDIO_PAD, T.AUDIO_END, T.IM_END, T.NEWLINE]
OLD_ASSISTANT = [T.IM_START, T.ASSISTANT, T.NEWLINE, 7, T.IM_END, T.NEWLINE]
HEADER = [T.IM_START, T.ASSISTANT, T.NEWLINE]


@pytest.fixture(scope="module")
def model() -> TalkerModel:
    return tiny_talker()


def test_user_positions_keep_every_user_turn_only() -> None:
    ids = SYSTEM + USER + OLD_ASSISTANT + USER + HEADER
    users = user_turn_positions(ids, tiny_config())
    assert users == list(range(6, 16)) + list(range(22, 32))


def test_prefill_layout(model: TalkerModel) -> None:
    ids = SYSTEM + USER + HEADER
    hidden = torch.randn(2, model.cfg.lm.thinker_hidden_size)
    prefill = build_prefill(model, SpeechPrompt(ids, "aiden", hidden), first_text=42)
    assert prefill.embeds.shape == (10 + 9, model.cfg.lm.hidden_size)
    assert torch.equal(prefill.positions, torch.arange(19.0).expand(3, -1))
    assert prefill.next_position == 19 and prefill.pending_text == []
    proj = model.lm.hidden_projection(hidden)
    assert torch.allclose(prefill.embeds[5:7], proj, atol=1e-6)  # the two audio pads carry the thinker's hidden states
    tok, codec = model.cfg.tokens, model.lm.codec_embedding
    speaker = model.text_embeds(torch.tensor(tok.tts_pad)) + codec(torch.tensor(2303))
    assert torch.allclose(prefill.embeds[10 + 6], speaker, atol=1e-6)
    last = model.text_embeds(torch.tensor(42)) + codec(torch.tensor(tok.codec_bos))
    assert torch.allclose(prefill.embeds[-1], last, atol=1e-6)


def test_assistant_text_in_the_prompt_is_spoken_first(model: TalkerModel) -> None:
    prefill = build_prefill(model, SpeechPrompt(USER + HEADER + [8, 9], "ethan", torch.randn(2, 64)), first_text=42)
    bos = model.lm.codec_embedding(torch.tensor(model.cfg.tokens.codec_bos))
    assert torch.allclose(prefill.embeds[-1], model.text_embeds(torch.tensor(8)) + bos, atol=1e-6)
    assert prefill.pending_text == [9, 42]


def test_media_rows_must_match_the_user_media_pads(model: TalkerModel) -> None:
    with pytest.raises(InvalidArgument, match="has 1 rows but the user turns hold 2") as err:
        build_prefill(model, SpeechPrompt(USER + HEADER, "ethan", torch.randn(1, 64)), first_text=1)
    assert err.value.violations[0].field == "media_hidden"


def test_prompt_without_assistant_header_is_rejected(model: TalkerModel) -> None:
    with pytest.raises(InvalidArgument, match="assistant"):
        build_prefill(model, SpeechPrompt(USER, "ethan", torch.randn(2, 64)), first_text=1)


def test_unknown_voice_is_rejected(model: TalkerModel) -> None:
    with pytest.raises(InvalidArgument, match="unknown voice 'zed'"):
        build_prefill(model, SpeechPrompt(USER + HEADER, "zed", torch.randn(2, 64)), first_text=1)
