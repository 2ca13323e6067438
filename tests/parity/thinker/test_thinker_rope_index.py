"""prompt_positions equals transformers' get_rope_index on text, image, video, audio and audio-in-video layouts."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from services.thinker.model import ThinkerLM, prompt_positions
from tests.parity.thinker.thinker_layouts import Layout, head, tail


def layouts() -> dict[str, Layout]:
    return {
        "text": Layout().text(head() + tail()),
        "images": Layout().text(head()).image((1, 4, 6)).text([104]).image((1, 8, 4)).text(tail()),
        "videos": Layout().text(head()).video((3, 4, 4), 1.0).text([104, 105]).video((2, 4, 6), 2.0).text(tail()),
        "image_and_video": Layout().text(head()).video((2, 4, 4), 2.0).image((1, 6, 4)).text(tail()),
        "audio_only": Layout().text(head()).audio(320).text([104]).audio(37).text(tail()),
        "audio_and_image": Layout().text(head()).audio(230).image((1, 4, 4)).audio(100).text(tail()),
        "audio_in_video": Layout().text(head()).audio_in_video((4, 4, 4), 1.0, 400).text(tail()),
        # video spatial extent (8 x 8) outlasts a short audio tail: the end token follows the audio run's max
        "audio_in_video_short_audio": Layout().text(head()).audio_in_video((1, 16, 16), 1.0, 37).text(tail()),
        "audio_in_video_then_image": (
            Layout().text(head()).audio_in_video((2, 4, 4), 2.0, 150).image((1, 4, 6)).text(tail())
        ),
    }


@pytest.mark.parametrize("name", list(layouts()))
def test_prompt_positions_match_get_rope_index(name: str, hf_omni: Any, thinker_lm: ThinkerLM) -> None:
    layout = layouts()[name]
    with torch.inference_mode():
        ref_positions, ref_delta = hf_omni.thinker.get_rope_index(**layout.rope_index_kwargs())
    ref_positions = ref_positions[:, 0]  # [3, T], float in the reference
    assert torch.equal(ref_positions, ref_positions.round()), "reference positions must be whole for this layout"
    ours = prompt_positions(layout.token_ids, layout.spans, thinker_lm.cfg)
    assert ours.positions.dtype == torch.long
    assert torch.equal(ours.positions, ref_positions.long())
    assert ours.rope_delta == int(ref_delta.reshape(-1)[0])
