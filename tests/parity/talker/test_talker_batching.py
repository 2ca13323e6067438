"""Concurrent speech rows (different voices, prompts, media, text lengths, seeds) produce what each produces alone."""
from __future__ import annotations

import torch

from runtime.checkpoint import token_ids as T
from tests.talker_lockstep import lockstep_generate
from services.talker.model.load import TalkerModel
from services.talker.model.mrope import VisualGrid
from services.talker.model.prompt import SpeechPrompt
from services.talker.model.sampling import TalkerSampling
from tests.parity.talker.talker_reference import (
    ASSISTANT_HEADER, SYSTEM_TURN, assert_codes_match, text_prompt, user_turn,
)

FRAMES = 20


def rows(model: TalkerModel) -> tuple[list[SpeechPrompt], list[list[int]]]:
    g = torch.Generator().manual_seed(11)
    hidden = model.cfg.lm.thinker_hidden_size
    audio_turn = user_turn([T.AUDIO_START] + [T.AUDIO_PAD] * 5 + [T.AUDIO_END, 250])
    image_turn = user_turn([T.VISION_START] + [T.IMAGE_PAD] * 4 + [T.VISION_END, 260, 261])
    prompts = [
        SpeechPrompt(text_prompt([200, 300, 400]), "ethan"),
        SpeechPrompt(SYSTEM_TURN + audio_turn + ASSISTANT_HEADER, "chelsie", torch.randn(5, hidden, generator=g)),
        SpeechPrompt(image_turn + ASSISTANT_HEADER, "aiden", torch.randn(4, hidden, generator=g),
                     images=(VisualGrid(1, 4, 4),)),  # fmt: skip
    ]
    texts = [list(range(10, 26)), [30, 31, 32, T.IM_END], list(range(40, 60))]
    return prompts, texts


def test_greedy_rows_batched_equal_alone(talker_model: TalkerModel) -> None:
    prompts, texts = rows(talker_model)
    batched = lockstep_generate(talker_model, prompts, [iter(t) for t in texts], max_frames=FRAMES, record_margins=True)
    for p, t, together in zip(prompts, texts, batched):
        (alone,) = lockstep_generate(talker_model, [p], [iter(t)], max_frames=FRAMES)
        assert assert_codes_match(alone.codes, together, min_frames=10) >= 10


def test_seeded_sampled_rows_batched_equal_alone(talker_model: TalkerModel) -> None:
    prompts, texts = rows(talker_model)
    samplings = [TalkerSampling(seed=s) for s in (1, 2, 3)]
    batched = lockstep_generate(talker_model, prompts, [iter(t) for t in texts], samplings, max_frames=FRAMES)
    for p, t, s, together in zip(prompts, texts, samplings, batched):
        (alone,) = lockstep_generate(talker_model, [p], [iter(t)], [s], max_frames=FRAMES)
        assert torch.equal(alone.codes, together.codes)
    (other_seed,) = lockstep_generate(
        talker_model, prompts[:1], [iter(texts[0])], [TalkerSampling(seed=99)], max_frames=FRAMES
    )
    assert not torch.equal(other_seed.codes, batched[0].codes)


def test_voice_changes_the_codes(talker_model: TalkerModel) -> None:
    prompt, text = text_prompt([200, 300, 400]), list(range(10, 26))
    ethan, chelsie = (
        lockstep_generate(talker_model, [SpeechPrompt(prompt, v)], [iter(text)], max_frames=6)[0].codes
        for v in ("ethan", "chelsie")
    )
    assert not torch.equal(ethan, chelsie)
