"""prompt_positions rules and every malformed-layout error, without transformers."""
from __future__ import annotations

import math

import pytest
import torch

from services.thinker.model import MediaKind, MediaSpanGrid, audio_token_count, decode_positions, prompt_positions
from tests.unit.thinker_model.thinker_tiny_config import tiny_config

CFG = tiny_config()
VS, VE, IMG, VID, AS, AE, AUD = 210, 211, 212, 213, 214, 215, 216


def test_text_only_is_arange_on_all_axes() -> None:
    out = prompt_positions([5, 6, 7, 8], [], CFG)
    assert out.positions.tolist() == [[0, 1, 2, 3]] * 3 and out.rope_delta == 0


def test_image_grid_layout_by_hand() -> None:
    # text, <vs>, a 2 x 3 merged grid at start 2, <ve> after the grid's largest position, text
    tokens = [1, VS] + [IMG] * 6 + [VE, 2]
    out = prompt_positions(tokens, [MediaSpanGrid(MediaKind.IMAGE, grid_thw=(1, 4, 6))], CFG)
    assert out.positions.tolist() == [
        [0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6],
    ]
    assert out.rope_delta == 7 - len(tokens)


def test_video_temporal_step_and_decode_positions() -> None:
    tokens = [VS] + [VID] * 2 + [VE]
    out = prompt_positions(tokens, [MediaSpanGrid(MediaKind.VIDEO, grid_thw=(2, 2, 2), second_per_grid=1.0)], CFG)
    assert out.positions[0].tolist() == [0, 1, 14, 15]
    assert out.rope_delta == 16 - 4
    assert decode_positions(torch.tensor([4, 9]), torch.tensor([12, 0])).tolist() == [[16, 9]] * 3


@pytest.mark.parametrize("frames", [1, 7, 8, 9, 37, 99, 100, 101, 230, 320, 400, 1234, 4999])
def test_audio_token_count_closed_form(frames: int) -> None:
    assert audio_token_count(frames) == 13 * (frames // 100) + math.ceil((frames % 100) / 8)


IMAGE = MediaSpanGrid(MediaKind.IMAGE, grid_thw=(1, 4, 4))


@pytest.mark.parametrize(
    ("tokens", "spans", "match"),
    [
        ([1, IMG, 2], [], "outside any span"),
        ([1, 2], [IMAGE], "only 0 of 1"),
        ([VS] + [IMG] * 3 + [VE], [IMAGE], "do not match"),
        ([VS] + [IMG] * 4 + [2], [IMAGE], "do not match"),
        ([VS, AS] + [VID] * 4 + [AE, VE], [MediaSpanGrid(MediaKind.AUDIO_IN_VIDEO, grid_thw=(1, 4, 4),
                                                         second_per_grid=1.0, num_audio_tokens=2)], "do not match"),
        ([VS, VID, VE], [MediaSpanGrid(MediaKind.VIDEO, grid_thw=(2, 2, 2), second_per_grid=0.5)], "fractional"),
        ([VS, VID, VE], [MediaSpanGrid(MediaKind.VIDEO, grid_thw=(2, 2, 2))], "second_per_grid"),
        ([VS, IMG, VE], [MediaSpanGrid(MediaKind.IMAGE)], "grid_thw is required"),
        ([VS, IMG, VE], [MediaSpanGrid(MediaKind.IMAGE, grid_thw=(1, 3, 2))], "multiples of 2"),
        ([AS, AE], [MediaSpanGrid(MediaKind.AUDIO)], "num_audio_tokens"),
        ([VS, AUD, AE, VE], [MediaSpanGrid(MediaKind.AUDIO_IN_VIDEO, grid_thw=(1, 2, 2), second_per_grid=1.0,
                                           num_audio_tokens=1)], "start tokens"),
    ],
)
def test_malformed_layouts_raise(tokens: list[int], spans: list[MediaSpanGrid], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        prompt_positions(tokens, spans, CFG)
