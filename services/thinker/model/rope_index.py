"""M-RoPE (t, h, w) positions of a prompt as a pure function of its token ids and media spans, and decode positions.

Placed a run at a time with numpy (a text run is one range, a grid a product of three): this runs on the thinker's
event loop for every request, and a token at a time a 60 s video's 11,760 rows took ~10 ms of it."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from services.thinker.model.config import ThinkerConfig


class MediaKind(str, enum.Enum):
    IMAGE = "image"  # <|vision_start|> <|image_pad|>*N <|vision_end|>
    VIDEO = "video"  # <|vision_start|> <|video_pad|>*N <|vision_end|>
    AUDIO = "audio"  # <|audio_start|> <|audio_pad|>*N <|audio_end|>
    # <|vision_start|><|audio_start|> video and audio pads interleaved by time <|audio_end|><|vision_end|>
    AUDIO_IN_VIDEO = "audio_in_video"


@dataclass(frozen=True)
class MediaSpanGrid:
    """One media item of a prompt, in prompt order: what M-RoPE needs to place its tokens."""

    kind: MediaKind
    grid_thw: tuple[int, int, int] | None = None  # vision patch grid (t, h, w) before the spatial merge
    second_per_grid: float = 0.0  # video: seconds covered by one temporal grid (temporal_patch_size / fps)
    num_audio_tokens: int = 0  # audio: encoder output tokens of the clip (see audio_token_count)


class PromptPositions(NamedTuple):
    positions: torch.Tensor  # int64 [3, T] (t, h, w)
    rope_delta: int  # decode token at KV index p sits at p + rope_delta on all three axes


def audio_token_count(mel_frames: int, n_window: int = 50) -> int:
    """Audio encoder tokens for a clip of `mel_frames` frames: 13 per full 2*n_window chunk plus the remainder's."""
    chunk = 2 * n_window
    rest = mel_frames % chunk
    after_conv1 = (rest - 1) // 2 + 1
    tail = ((after_conv1 - 1) // 2 + 1 - 1) // 2 + 1
    return tail + (mel_frames // chunk) * 13


def decode_positions(kv_positions: torch.Tensor, rope_deltas: torch.Tensor) -> torch.Tensor:
    """Positions of generated tokens: KV index ([N]) + each row's rope_delta ([N]) on all three axes -> [3, N]."""
    return (kv_positions + rope_deltas).unsqueeze(0).expand(3, -1)


def prompt_positions(token_ids: list[int], spans: list[MediaSpanGrid], cfg: ThinkerConfig) -> PromptPositions:
    """(t, h, w) of every prompt token. Text advances all axes by one from the largest position so far; each media
    span is its start token(s), its body laid out by kind, and its end token(s) after the body's largest position."""
    ids = np.asarray(token_ids, dtype=np.int64)
    pads = np.isin(ids, [cfg.image_token_id, cfg.video_token_id, cfg.audio_token_id])
    runs: list[np.ndarray] = []  # [3, n] each, in prompt order
    next_pos = 0
    i = 0
    for index, span in enumerate(spans):
        opens = _span_opening(ids, i, span, cfg)
        _check_text(ids, pads, i, len(ids) if opens is None else opens, len(spans) - index, len(spans))
        if opens is None:
            raise ValueError(f"only {index} of {len(spans)} media spans were found in token_ids")
        runs.append(_same_on_all_axes(next_pos, opens - i))
        next_pos += opens - i
        i, next_pos = _place_span(ids, opens, span, index, next_pos, cfg, runs)
    _check_text(ids, pads, i, len(ids), 0, len(spans))
    runs.append(_same_on_all_axes(next_pos, len(ids) - i))
    positions = torch.from_numpy(np.concatenate(runs, axis=1))
    max_pos = int(positions.max()) if positions.numel() else -1
    return PromptPositions(positions, max_pos + 1 - len(token_ids))


def _same_on_all_axes(start: int, n: int) -> np.ndarray:
    return np.broadcast_to(np.arange(start, start + n, dtype=np.int64), (3, n))


def _check_text(ids: np.ndarray, pads: np.ndarray, lo: int, hi: int, left: int, total: int) -> None:
    """Text tokens [lo, hi) hold no media placeholder."""
    found = np.flatnonzero(pads[lo:hi])
    if found.size:
        k = lo + int(found[0])
        raise ValueError(
            f"token {k} ({int(ids[k])}) is a media placeholder outside any span; "
            f"{left} of {total} spans were left to place; give one MediaSpanGrid per media item, in prompt order"
        )


def _span_opening(ids: np.ndarray, i: int, span: MediaSpanGrid, cfg: ThinkerConfig) -> int | None:
    """The first index at or after i where the span starts: its start token, not followed by plain text. A start
    token before plain text is text itself: a Qwen3.5 video's outer `<|vision_start|>` precedes its first frame's
    timestamp."""
    start = cfg.audio_start_token_id if span.kind == MediaKind.AUDIO else cfg.vision_start_token_id
    markup = {cfg.image_token_id, cfg.video_token_id, cfg.audio_token_id, cfg.vision_start_token_id,
              cfg.vision_end_token_id, cfg.audio_start_token_id, cfg.audio_end_token_id}
    for k in np.flatnonzero(ids[i:] == start):
        j = i + int(k)
        if j + 1 == len(ids) or int(ids[j + 1]) in markup:
            return j
    return None


def _place_span(
    ids: np.ndarray, i: int, span: MediaSpanGrid, index: int, start: int, cfg: ThinkerConfig, runs: list[np.ndarray],
) -> tuple[int, int]:
    """Append the span's columns; return the index after its last token and the next text position."""
    nested = span.kind == MediaKind.AUDIO_IN_VIDEO
    bos_ids, eos_ids = _span_markers(span.kind, cfg)
    body_start = i + len(bos_ids)
    if ids[i:body_start].tolist() != bos_ids:
        raise ValueError(f"span {index} ({span.kind.value}) at token {i}: expected start tokens {bos_ids}")
    runs.append(_same_on_all_axes(start, len(bos_ids)))
    body, body_ids, last_chunk_max = _span_body(span, index, start + len(bos_ids), cfg)
    body_end = body_start + body.shape[1]
    if not (np.array_equal(ids[body_start:body_end], body_ids)
            and ids[body_end:body_end + len(eos_ids)].tolist() == eos_ids):
        raise ValueError(
            f"span {index} ({span.kind.value}) at token {i}: expected {body.shape[1]} placeholder tokens"
            f"{' interleaved by time' if nested else ''} then {eos_ids}; the prompt's placeholders do not match "
            "the span's grid or audio length"
        )
    runs.append(body)
    # The end token follows the largest position of the body's last placed run (for audio-in-video the
    # run that finishes the interleave), which is the rule the reference implements.
    eos_pos = last_chunk_max + 1
    runs.append(_same_on_all_axes(eos_pos, len(eos_ids)))
    return body_end + len(eos_ids), eos_pos + len(eos_ids)


def _span_markers(kind: MediaKind, cfg: ThinkerConfig) -> tuple[list[int], list[int]]:
    if kind == MediaKind.AUDIO:
        return [cfg.audio_start_token_id], [cfg.audio_end_token_id]
    if kind == MediaKind.AUDIO_IN_VIDEO:
        return ([cfg.vision_start_token_id, cfg.audio_start_token_id],
                [cfg.audio_end_token_id, cfg.vision_end_token_id])
    return [cfg.vision_start_token_id], [cfg.vision_end_token_id]


def _span_body(span: MediaSpanGrid, index: int, start: int, cfg: ThinkerConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """Body columns [3, n], the placeholder id each body token must be, and the largest position of the last run
    placed."""
    if span.kind == MediaKind.AUDIO:
        audio = _audio_columns(span, index, start)
        return audio, np.full(audio.shape[1], cfg.audio_token_id), int(audio.max())
    pad = cfg.image_token_id if span.kind == MediaKind.IMAGE else cfg.video_token_id
    vision = _vision_columns(span, index, start, cfg)
    if span.kind != MediaKind.AUDIO_IN_VIDEO:
        return vision, np.full(vision.shape[1], pad), int(vision.max())
    audio = _audio_columns(span, index, start)
    return _interleave(vision, audio, pad, cfg.audio_token_id)


def _audio_columns(span: MediaSpanGrid, index: int, start: int) -> np.ndarray:
    if span.num_audio_tokens <= 0:
        raise ValueError(f"span {index} ({span.kind.value}): num_audio_tokens must be positive")
    return _same_on_all_axes(start, span.num_audio_tokens)


def _vision_columns(span: MediaSpanGrid, index: int, start: int, cfg: ThinkerConfig) -> np.ndarray:
    if span.grid_thw is None:
        raise ValueError(f"span {index} ({span.kind.value}): grid_thw is required for images and videos")
    grid_t, grid_h, grid_w = span.grid_thw
    merge = cfg.spatial_merge_size
    if grid_t <= 0 or grid_h % merge or grid_w % merge or grid_h <= 0 or grid_w <= 0:
        raise ValueError(
            f"span {index}: grid_thw {span.grid_thw} needs t > 0 and h, w positive multiples of {merge}"
        )
    times = np.asarray(_temporal_offsets(span, index, grid_t, cfg.position_id_per_seconds), dtype=np.int64)
    rows, cols = grid_h // merge, grid_w // merge
    t = np.repeat(times, rows * cols)  # frame by frame, each row by row
    h = np.tile(np.repeat(np.arange(rows, dtype=np.int64), cols), grid_t)
    w = np.tile(np.arange(cols, dtype=np.int64), grid_t * rows)
    return np.stack([t, h, w]) + start


def _temporal_offsets(span: MediaSpanGrid, index: int, grid_t: int, per_second: int) -> list[int]:
    """t offset of each temporal grid: k * position_id_per_seconds for images, k * second_per_grid * that for
    video, computed in fp32 as the reference does; only whole offsets can be positions of an int64 layout."""
    if span.kind == MediaKind.IMAGE:
        return [k * per_second for k in range(grid_t)]
    if span.second_per_grid <= 0:
        raise ValueError(f"span {index} ({span.kind.value}): second_per_grid must be positive")
    offsets = torch.arange(grid_t, dtype=torch.float32) * torch.tensor(span.second_per_grid, dtype=torch.float32)
    offsets = offsets * per_second
    if not torch.equal(offsets, offsets.round()):
        raise ValueError(
            f"span {index}: second_per_grid {span.second_per_grid} x position_id_per_seconds {per_second} gives "
            "fractional temporal positions; sample video at an fps where temporal_patch_size / fps * "
            f"{per_second} is whole (e.g. 2 fps)"
        )
    return [int(v) for v in offsets.tolist()]


def _interleave(video: np.ndarray, audio: np.ndarray, video_id: int,
                audio_id: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Video and audio columns merged by t, video first on ties, as the processor orders the tokens; and the largest
    position of what is left of one of them once the other ran out (the run that finishes the interleave). Both are
    sorted by t, so a stable sort of video-then-audio is that merge."""
    n_video = video.shape[1]
    order = np.argsort(np.concatenate([video[0], audio[0]]), kind="stable")
    body = np.concatenate([video, audio], axis=1)[:, order]
    is_video = order < n_video
    last_video = int(np.flatnonzero(is_video)[-1])
    last_audio = int(np.flatnonzero(~is_video)[-1])
    rest = body[:, min(last_video, last_audio) + 1:]
    return body, np.where(is_video, video_id, audio_id), int(rest.max())
