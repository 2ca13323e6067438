"""Talker-prompt M-RoPE positions equal the reference talker's `get_rope_index` (as `generate` calls it)."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from runtime.checkpoint import token_ids as T
from services.talker.model.load import TalkerModel
from services.talker.model.mrope import VisualGrid, talker_positions

PADS = [T.TTS_PAD] * 9


def audio(mel_frames: int) -> list[int]:
    tokens = 13 * (mel_frames // 100) + -(-(mel_frames % 100) // 8)
    return [T.AUDIO_START] + [T.AUDIO_PAD] * tokens + [T.AUDIO_END]


def image(grid: VisualGrid) -> list[int]:
    return [T.VISION_START] + [T.IMAGE_PAD] * (grid.t * grid.h * grid.w // 4) + [T.VISION_END]


def video(grid: VisualGrid) -> list[int]:
    return [T.VISION_START] + [T.VIDEO_PAD] * (grid.t * grid.h * grid.w // 4) + [T.VISION_END]


def audio_in_video(grid: VisualGrid, mel_frames: int) -> list[int]:
    n_audio = len(audio(mel_frames)) - 2
    body = [T.VIDEO_PAD, T.AUDIO_PAD] * min(n_audio, grid.t * grid.h * grid.w // 4)
    body += [T.VIDEO_PAD] * (grid.t * grid.h * grid.w // 4 - body.count(T.VIDEO_PAD))
    body += [T.AUDIO_PAD] * (n_audio - body.count(T.AUDIO_PAD))
    return [T.VISION_START, T.AUDIO_START] + body + [T.AUDIO_END, T.VISION_END]


IMG_A, IMG_B = VisualGrid(1, 4, 6), VisualGrid(1, 2, 2)
VID_HALF, VID_TWO = VisualGrid(3, 4, 4, 0.5), VisualGrid(2, 2, 4, 2.0)
CASES = {
    "text_only_with_grids": ([1, 2, 3], [IMG_A], [], []),
    "image_audio_text": ([5, *image(IMG_A), 6, *audio(230), 7], [IMG_A], [], [230]),
    "two_images_fractional_video": (
        [*image(IMG_A), 8, *video(VID_HALF), *image(IMG_B)], [IMG_A, IMG_B], [VID_HALF], []
    ),
    "audio_first_then_video": ([*audio(100), *video(VID_TWO), 9], [], [VID_TWO], [100]),
    "audio_in_video_alone": ([4, *audio_in_video(VID_TWO, 100), 5], [], [VID_TWO], [100]),
    # (an audio-in-video span followed by another video or image makes the reference itself raise IndexError)
}


@pytest.mark.parametrize("name", list(CASES))
def test_positions_match_reference(name: str, hf_omni: Any, talker_model: TalkerModel) -> None:
    body, images, videos, mel = CASES[name]
    ids = [T.IM_START, T.USER, T.NEWLINE, *body, T.IM_END, T.NEWLINE, *PADS]
    cfg = talker_model.cfg
    ours = talker_positions(ids, cfg.tokens, images, videos, cfg.spatial_merge_size, cfg.position_id_per_seconds)

    def grid(items: list[VisualGrid]) -> torch.Tensor | None:
        return torch.tensor([[g.t, g.h, g.w] for g in items]) if items else None

    ref, _ = hf_omni.talker.get_rope_index(
        torch.tensor([ids]), grid(images), grid(videos), torch.ones(1, len(ids), dtype=torch.long), False,
        torch.tensor(mel) if mel else None, torch.tensor([g.seconds_per_grid for g in videos]) if videos else None,
    )  # fmt: skip
    assert ours.shape == (3, len(ids))
    assert torch.equal(ours, ref[:, 0].float())
