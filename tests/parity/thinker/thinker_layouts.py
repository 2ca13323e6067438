"""Builds multimodal prompt layouts (token ids, our MediaSpanGrids, and the reference's get_rope_index arguments)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from runtime.checkpoint import token_ids as ids
from services.thinker.model import MediaKind, MediaSpanGrid, audio_token_count

MERGE = 2


@dataclass
class Layout:
    token_ids: list[int] = field(default_factory=list)
    spans: list[MediaSpanGrid] = field(default_factory=list)
    image_grids: list[list[int]] = field(default_factory=list)
    video_grids: list[list[int]] = field(default_factory=list)
    second_per_grids: list[float] = field(default_factory=list)
    audio_frames: list[int] = field(default_factory=list)
    use_audio_in_video: bool = False

    def text(self, tokens: list[int]) -> Layout:
        self.token_ids += tokens
        return self

    def image(self, grid: tuple[int, int, int]) -> Layout:
        self.token_ids += [ids.VISION_START] + [ids.IMAGE_PAD] * vision_tokens(grid) + [ids.VISION_END]
        self.spans.append(MediaSpanGrid(MediaKind.IMAGE, grid_thw=grid))
        self.image_grids.append(list(grid))
        return self

    def video(self, grid: tuple[int, int, int], second_per_grid: float) -> Layout:
        self.token_ids += [ids.VISION_START] + [ids.VIDEO_PAD] * vision_tokens(grid) + [ids.VISION_END]
        self.spans.append(MediaSpanGrid(MediaKind.VIDEO, grid_thw=grid, second_per_grid=second_per_grid))
        self.video_grids.append(list(grid))
        self.second_per_grids.append(second_per_grid)
        return self

    def audio(self, mel_frames: int) -> Layout:
        count = audio_token_count(mel_frames)
        self.token_ids += [ids.AUDIO_START] + [ids.AUDIO_PAD] * count + [ids.AUDIO_END]
        self.spans.append(MediaSpanGrid(MediaKind.AUDIO, num_audio_tokens=count))
        self.audio_frames.append(mel_frames)
        return self

    def audio_in_video(self, grid: tuple[int, int, int], second_per_grid: float, mel_frames: int) -> Layout:
        """Video and audio pads ordered by time, video first on ties (the processor's order), stated independently."""
        count = audio_token_count(mel_frames)
        per_frame = vision_tokens(grid) // grid[0]
        step = second_per_grid * ids.POSITION_ID_PER_SECONDS
        stamped = [(k * step, 0) for k in range(grid[0]) for _ in range(per_frame)]
        stamped += [(float(j), 1) for j in range(count)]
        body = [ids.VIDEO_PAD if is_audio == 0 else ids.AUDIO_PAD for _, is_audio in sorted(stamped)]
        self.token_ids += [ids.VISION_START, ids.AUDIO_START] + body + [ids.AUDIO_END, ids.VISION_END]
        self.spans.append(MediaSpanGrid(
            MediaKind.AUDIO_IN_VIDEO, grid_thw=grid, second_per_grid=second_per_grid, num_audio_tokens=count
        ))
        self.video_grids.append(list(grid))
        self.second_per_grids.append(second_per_grid)
        self.audio_frames.append(mel_frames)
        self.use_audio_in_video = True
        return self

    def rope_index_kwargs(self) -> dict[str, Any]:
        """Arguments of transformers' `get_rope_index` for this single-row layout."""
        input_ids = torch.tensor([self.token_ids])
        return dict(
            input_ids=input_ids,
            image_grid_thw=torch.tensor(self.image_grids) if self.image_grids else None,
            video_grid_thw=torch.tensor(self.video_grids) if self.video_grids else None,
            attention_mask=torch.ones_like(input_ids),
            use_audio_in_video=self.use_audio_in_video,
            audio_seqlens=torch.tensor(self.audio_frames) if self.audio_frames else None,
            second_per_grids=torch.tensor(self.second_per_grids) if self.second_per_grids else None,
        )


def vision_tokens(grid: tuple[int, int, int]) -> int:
    return grid[0] * grid[1] * grid[2] // (MERGE * MERGE)


def head() -> list[int]:
    return [ids.IM_START, ids.USER, ids.NEWLINE, 101, 102]


def tail() -> list[int]:
    return [103, ids.IM_END, ids.NEWLINE, ids.IM_START, ids.ASSISTANT, ids.NEWLINE]
