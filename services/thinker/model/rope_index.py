"""M-RoPE (t, h, w) positions of a prompt as a pure function of its token ids and media spans, and decode positions."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

import torch

from services.thinker.model.config import ThinkerConfig

Column = tuple[int, int, int]  # (t, h, w) of one token


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
    columns: list[Column] = []
    next_pos = 0
    span_index = 0
    i = 0
    pad_ids = {cfg.image_token_id, cfg.video_token_id, cfg.audio_token_id}
    while i < len(token_ids):
        span = spans[span_index] if span_index < len(spans) else None
        if span is not None and _opens_span(token_ids, i, span, cfg):
            i, next_pos = _place_span(token_ids, i, span, span_index, next_pos, cfg, columns)
            span_index += 1
            continue
        if token_ids[i] in pad_ids:
            raise ValueError(
                f"token {i} ({token_ids[i]}) is a media placeholder outside any span; "
                f"{len(spans) - span_index} of {len(spans)} spans were left to place; give one MediaSpanGrid per "
                "media item, in prompt order"
            )
        columns.append((next_pos, next_pos, next_pos))
        next_pos += 1
        i += 1
    if span_index != len(spans):
        raise ValueError(f"only {span_index} of {len(spans)} media spans were found in token_ids")
    positions = torch.tensor(columns, dtype=torch.long).reshape(-1, 3).T.contiguous()  # [T, 3] -> [3, T]
    max_pos = int(positions.max()) if positions.numel() else -1
    return PromptPositions(positions, max_pos + 1 - len(token_ids))


def _opens_span(token_ids: list[int], i: int, span: MediaSpanGrid, cfg: ThinkerConfig) -> bool:
    """Whether the span starts at token i: its start token, not followed by plain text. A start token before plain
    text is text itself: a Qwen3.5 video's outer `<|vision_start|>` precedes its first frame's timestamp."""
    start = cfg.audio_start_token_id if span.kind == MediaKind.AUDIO else cfg.vision_start_token_id
    if token_ids[i] != start:
        return False
    markup = {cfg.image_token_id, cfg.video_token_id, cfg.audio_token_id, cfg.vision_start_token_id,
              cfg.vision_end_token_id, cfg.audio_start_token_id, cfg.audio_end_token_id}
    return i + 1 == len(token_ids) or token_ids[i + 1] in markup


def _place_span(
    token_ids: list[int], i: int, span: MediaSpanGrid, index: int, start: int, cfg: ThinkerConfig,
    columns: list[Column],
) -> tuple[int, int]:
    """Append the span's columns; return the index after its last token and the next text position."""
    nested = span.kind == MediaKind.AUDIO_IN_VIDEO
    bos_ids, eos_ids = _span_markers(span.kind, cfg)
    body_start = i + len(bos_ids)
    if token_ids[i:body_start] != bos_ids:
        raise ValueError(f"span {index} ({span.kind.value}) at token {i}: expected start tokens {bos_ids}")
    columns.extend((start + k, start + k, start + k) for k in range(len(bos_ids)))
    body_pos = start + len(bos_ids)
    body, body_kinds, last_chunk_max = _span_body(span, index, body_pos, cfg)
    body_end = body_start + len(body)
    expected = [_pad_id(kind, cfg) for kind in body_kinds]
    if token_ids[body_start:body_end] != expected or token_ids[body_end:body_end + len(eos_ids)] != eos_ids:
        raise ValueError(
            f"span {index} ({span.kind.value}) at token {i}: expected {len(body)} placeholder tokens"
            f"{' interleaved by time' if nested else ''} then {eos_ids}; the prompt's placeholders do not match "
            "the span's grid or audio length"
        )
    columns.extend(body)
    # The end token follows the largest position of the body's last placed run (for audio-in-video the
    # run that finishes the interleave), which is the rule the reference implements.
    eos_pos = last_chunk_max + 1
    columns.extend((eos_pos + k, eos_pos + k, eos_pos + k) for k in range(len(eos_ids)))
    return body_end + len(eos_ids), eos_pos + len(eos_ids)


def _span_markers(kind: MediaKind, cfg: ThinkerConfig) -> tuple[list[int], list[int]]:
    if kind == MediaKind.AUDIO:
        return [cfg.audio_start_token_id], [cfg.audio_end_token_id]
    if kind == MediaKind.AUDIO_IN_VIDEO:
        return ([cfg.vision_start_token_id, cfg.audio_start_token_id],
                [cfg.audio_end_token_id, cfg.vision_end_token_id])
    return [cfg.vision_start_token_id], [cfg.vision_end_token_id]


def _pad_id(kind: MediaKind, cfg: ThinkerConfig) -> int:
    return {MediaKind.IMAGE: cfg.image_token_id, MediaKind.VIDEO: cfg.video_token_id,
            MediaKind.AUDIO: cfg.audio_token_id}[kind]


def _span_body(
    span: MediaSpanGrid, index: int, start: int, cfg: ThinkerConfig
) -> tuple[list[Column], list[MediaKind], int]:
    """Body columns, the kind of each body token, and the largest position of the last run placed."""
    if span.kind == MediaKind.AUDIO:
        audio = _audio_columns(span, index, start)
        return audio, [MediaKind.AUDIO] * len(audio), _run_max(audio)
    kind = MediaKind.IMAGE if span.kind == MediaKind.IMAGE else MediaKind.VIDEO
    vision = _vision_columns(span, index, start, cfg)
    if span.kind != MediaKind.AUDIO_IN_VIDEO:
        return vision, [kind] * len(vision), _run_max(vision)
    return _interleave(vision, _audio_columns(span, index, start))


def _audio_columns(span: MediaSpanGrid, index: int, start: int) -> list[Column]:
    if span.num_audio_tokens <= 0:
        raise ValueError(f"span {index} ({span.kind.value}): num_audio_tokens must be positive")
    return [(start + k, start + k, start + k) for k in range(span.num_audio_tokens)]


def _vision_columns(span: MediaSpanGrid, index: int, start: int, cfg: ThinkerConfig) -> list[Column]:
    if span.grid_thw is None:
        raise ValueError(f"span {index} ({span.kind.value}): grid_thw is required for images and videos")
    grid_t, grid_h, grid_w = span.grid_thw
    merge = cfg.spatial_merge_size
    if grid_t <= 0 or grid_h % merge or grid_w % merge or grid_h <= 0 or grid_w <= 0:
        raise ValueError(
            f"span {index}: grid_thw {span.grid_thw} needs t > 0 and h, w positive multiples of {merge}"
        )
    times = _temporal_offsets(span, index, grid_t, cfg.position_id_per_seconds)
    rows, cols = grid_h // merge, grid_w // merge
    return [(start + t, start + r, start + c) for t in times for r in range(rows) for c in range(cols)]


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


def _interleave(
    video: list[Column], audio: list[Column]
) -> tuple[list[Column], list[MediaKind], int]:
    """Merge video and audio columns by t, video first on ties, as the processor orders the tokens."""
    body: list[Column] = []
    kinds: list[MediaKind] = []
    v = a = 0
    last_run: list[Column] = []
    while v < len(video) and a < len(audio):
        if video[v][0] <= audio[a][0]:
            last_run = [video[v]]
            body.append(video[v])
            kinds.append(MediaKind.VIDEO)
            v += 1
        else:
            last_run = [audio[a]]
            body.append(audio[a])
            kinds.append(MediaKind.AUDIO)
            a += 1
    for rest, kind in ((video[v:], MediaKind.VIDEO), (audio[a:], MediaKind.AUDIO)):
        if rest:
            last_run = rest
            body.extend(rest)
            kinds.extend([kind] * len(rest))
    return body, kinds, _run_max(last_run)


def _run_max(run: list[Column]) -> int:
    return max(max(col) for col in run)
