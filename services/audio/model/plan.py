"""Host-side batch plan for the AuT encoder: every index, mask and `cu_seqlens` the forward needs, from lengths alone.

Semantics (one clip's output never depends on what it is batched with): each clip is cut into chunks of
`chunk_frames` (100) mel frames. A clip of at least one chunk pads its tail chunk with zeros to a full chunk; a
shorter clip is convolved at its own length. Both are exactly what transformers does for that clip alone (it pads
every chunk of a batch to the batch's longest chunk, so in a mixed batch its short clips see extra padding; ours do
not). Every launch still pads every chunk to a full chunk, for one conv shape: the stem masks a short clip back to
its length after each convolution, which is the same as convolving it unpadded. Qwen3-ASR (`pad_short_clips`)
convolves a short clip as a zero-padded full chunk, as its feature extractor pads every clip to whole chunks.

Two kinds of plan: `plan_batch` (exact rows, several bounded conv launches: the eager path) and `plan_bucketed`
(tensor shapes that depend only on `bucket_key`: the CUDA-graph path, see graphs.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from runtime.audio_lengths import STEM_STRIDE, audio_token_count, stem_output_length
from services.audio.model.config import AudioEncoderConfig
from services.audio.transfer import to_device_many

DEFAULT_CHUNKS_PER_LAUNCH = 64  # bounds the conv stem's working set (~6 MB of bf16 activations per chunk at real dims)
MASK_STRIDES = (2, 4)  # time strides of the conv outputs a short clip's mask is applied to


@dataclass(frozen=True)
class ConvLaunch:
    """One conv-stem launch over consecutive chunks, all padded to `pad_frames` (a full chunk's) frames."""

    num_chunks: int
    pad_frames: int
    frame_index: torch.Tensor  # int32 [num_chunks * pad_frames]: packed mel frame, or the zero frame
    masks: tuple[torch.Tensor, torch.Tensor] | None  # [K, ceil(pad/2)], [K, ceil(pad/4)] over time; None: unneeded
    token_index: torch.Tensor | None  # int32 [num_rows]: rows of [num_chunks * stem tokens] kept; None: all rows
    row_offset: int  # first hidden row this launch writes
    num_rows: int

    @property
    def stem_tokens(self) -> int:
        return stem_output_length(self.pad_frames)


@dataclass(frozen=True)
class AudioBatchPlan:
    """Everything about a batch of clips that follows from their frame counts; built on the host, moved once.

    The forward computes `num_rows` hidden rows: the clips' `num_tokens` tokens packed in clip order, then (bucketed
    plans only) padding rows that sit in one extra attention window of their own and are dropped at the end.
    """

    frame_counts: tuple[int, ...]
    token_counts: tuple[int, ...]
    launches: tuple[ConvLaunch, ...]
    zero_frame: int  # row of the stacked mel that holds zeros (the stem reads it for every padded frame)
    cu_seqlens: torch.Tensor  # int32 [windows + 1]: attention windows over the rows
    max_window: int  # longest window (an upper bound in bucketed plans), a host int so attention needs no sync
    window_index: torch.Tensor  # int32 [windows, max_window]: row per slot; 0 (masked, dropped) if empty
    window_valid: torch.Tensor | None  # bool [windows, max_window]; None when every window is full
    token_slot: torch.Tensor  # int32 [num_rows]: each row's flat slot in [windows * max_window]

    @property
    def total_frames(self) -> int:
        return sum(self.frame_counts)

    @property
    def num_tokens(self) -> int:
        return sum(self.token_counts)

    @property
    def num_rows(self) -> int:
        return sum(launch.num_rows for launch in self.launches)

    @property
    def num_windows(self) -> int:
        return self.cu_seqlens.shape[0] - 1

    def to(self, device: torch.device | str, dtype: torch.dtype) -> AudioBatchPlan:
        """This plan with its tensors on `device` (masks in `dtype`), in one copy per dtype, not blocking the host."""
        return self.with_tensors(to_device_many(self.tensors(dtype), torch.device(device)))

    def tensors(self, mask_dtype: torch.dtype) -> list[torch.Tensor]:
        """Every tensor of the plan in a fixed order (masks cast to `mask_dtype`); two plans with the same bucket
        key give lists of the same shapes, which is what lets a graph refill its copy in place."""
        out = [t for t in (self.cu_seqlens, self.window_index, self.window_valid, self.token_slot) if t is not None]
        for launch in self.launches:
            out += [t for t in (launch.frame_index, launch.token_index) if t is not None]
            out += [mask.to(mask_dtype) for mask in launch.masks or ()]
        return out

    def with_tensors(self, tensors: list[torch.Tensor]) -> AudioBatchPlan:
        """This plan with `tensors` (in the order of `tensors()`) in place of its own; None fields stay None."""
        it = iter(tensors)

        def take(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else next(it)

        cu_seqlens, window_index, window_valid, token_slot = (
            take(t) for t in (self.cu_seqlens, self.window_index, self.window_valid, self.token_slot))
        launches = []
        for launch in self.launches:
            frame_index, token_index = take(launch.frame_index), take(launch.token_index)
            masks = None if launch.masks is None else (next(it), next(it))
            launches.append(dataclasses.replace(launch, frame_index=frame_index, token_index=token_index,
                                                masks=masks))
        return dataclasses.replace(self, launches=tuple(launches), cu_seqlens=cu_seqlens, window_index=window_index,
                                   window_valid=window_valid, token_slot=token_slot)


def plan_batch(
    frame_counts: list[int] | tuple[int, ...],
    config: AudioEncoderConfig,
    chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH,
) -> AudioBatchPlan:
    """The plan for clips of `frame_counts` mel frames, packed in that order. Pure host work (numpy, vectorised:
    it sits on the latency path of every forward); no device is touched."""
    frames = _check_frames(frame_counts)
    if chunks_per_launch < 1:
        raise ValueError(f"chunks_per_launch must be >= 1, got {chunks_per_launch}")
    token_counts = np.asarray([audio_token_count(int(t), config.chunk_frames) for t in frames])
    start, length, conv_length = _chunks(frames, config.chunk_frames, config.pad_short_clips)
    zero_frame = int(frames.sum())
    launches: list[ConvLaunch] = []
    offset = 0
    for first in range(0, start.shape[0], chunks_per_launch):
        part = slice(first, first + chunks_per_launch)
        launch = _launch(start[part], length[part], conv_length[part], zero_frame, offset, config.chunk_frames)
        launches.append(launch)
        offset += launch.num_rows
    lengths = _clip_windows(token_counts, config.window_tokens)
    return AudioBatchPlan(tuple(int(t) for t in frames), tuple(int(n) for n in token_counts), tuple(launches),
                          zero_frame, **_windows(lengths, int(lengths.max()), masked=False))


def bucket_key(frame_counts: list[int] | tuple[int, ...], chunk_frames: int) -> tuple[int, ...]:
    """What a bucketed plan's shapes depend on: per clip its chunk count, or 0 for a clip shorter than one chunk
    (convolved at its own length, so masked). A 5 s clip is (5,), whatever its exact length in (4 s, 5 s]."""
    return tuple(0 if t < chunk_frames else -(-t // chunk_frames) for t in frame_counts)


def bucket_chunks(key: tuple[int, ...]) -> int:
    """Conv-stem chunks of a bucket; the stacked mel a bucketed plan reads has this many chunks of frames."""
    return sum(max(k, 1) for k in key)


def plan_bucketed(frame_counts: list[int] | tuple[int, ...], config: AudioEncoderConfig) -> AudioBatchPlan:
    """A plan whose tensor shapes and host ints depend only on `bucket_key(frame_counts)`, for CUDA-graph replay.

    One launch, the zero frame after the bucket's capacity, and every stem row kept: the clips' tokens first in
    packed order, then the tail chunks' padding rows plus a copy of row 0, so the extra window they form is never
    empty. A clip of k chunks has
    13(k-1) < tokens <= 13k, hence always ceil(k/8) windows of 104: the window count is fixed too.
    """
    frames = _check_frames(frame_counts)
    chunk = config.chunk_frames
    token_counts = np.asarray([audio_token_count(int(t), chunk) for t in frames])
    start, length, conv_length = _chunks(frames, chunk, config.pad_short_clips)
    zero_frame = start.shape[0] * chunk
    launch = _launch(start, length, conv_length, zero_frame, 0, chunk, keep_padding_rows=True)
    num_tokens = int(token_counts.sum())
    lengths = np.append(_clip_windows(token_counts, config.window_tokens), launch.num_rows - num_tokens)
    bound = max(config.window_tokens, (config.chunk_tokens - 1) * len(frames) + 1)  # longest padding window
    return AudioBatchPlan(tuple(int(t) for t in frames), tuple(int(n) for n in token_counts), (launch,), zero_frame,
                          **_windows(lengths, bound, masked=True))


def _check_frames(frame_counts: list[int] | tuple[int, ...]) -> np.ndarray:
    if len(frame_counts) == 0:
        raise ValueError("plan_batch needs at least one clip")
    if min(frame_counts) < 1:
        raise ValueError(f"every clip needs at least one mel frame, got frame_counts={list(frame_counts)}")
    return np.asarray(frame_counts, dtype=np.int64)


def _ceil_div(a: np.ndarray | int, b: int) -> np.ndarray:
    return -(-np.asarray(a) // b)


def _int32(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32))


def _segments(lengths: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut each of `lengths` into pieces of `size` (the last shorter): (owner of each piece, piece index in owner)."""
    pieces = _ceil_div(lengths, size)  # [B]
    owner = np.repeat(np.arange(lengths.shape[0]), pieces)  # [P]
    index = np.arange(owner.shape[0]) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # [P]
    return owner, index


def _chunks(frames: np.ndarray, chunk: int, pad_short_clips: bool = False
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk: first packed frame, frames, and the length it is convolved at (a full chunk or a short clip's own;
    with `pad_short_clips`, always a full chunk)."""
    clip, index = _segments(frames, chunk)
    clip_start = np.cumsum(frames) - frames  # [B]
    start = clip_start[clip] + index * chunk
    length = np.minimum(chunk, frames[clip] - index * chunk)
    conv_length = np.full_like(length, chunk) if pad_short_clips else np.minimum(frames, chunk)[clip]
    return start, length, conv_length


def _launch(start: np.ndarray, length: np.ndarray, conv_length: np.ndarray, zero_frame: int, row_offset: int,
            pad: int, keep_padding_rows: bool = False) -> ConvLaunch:
    slots = np.arange(pad)[None, :]  # [1, P]
    frame_index = np.where(slots < length[:, None], start[:, None] + slots, zero_frame).reshape(-1)  # [K * P]
    masks = None
    if (conv_length < pad).any():
        masks = tuple(torch.from_numpy((np.arange(_ceil_div(pad, s)) < _ceil_div(conv_length, s)[:, None])
                                       .astype(np.float32)) for s in MASK_STRIDES)  # [K, ceil(pad / s)] each
    valid = np.arange(stem_output_length(pad))[None, :] < _ceil_div(length, STEM_STRIDE)[:, None]  # [K, stem rows]
    kept = np.flatnonzero(valid)
    if keep_padding_rows:  # tokens, then padding rows, then row 0 again (see plan_bucketed)
        rows = np.concatenate([kept, np.flatnonzero(~valid), [0]])
        token_index = _int32(rows)
    else:
        rows = kept
        token_index = None if kept.size == valid.size else _int32(kept)
    return ConvLaunch(start.shape[0], pad, _int32(frame_index), masks, token_index, row_offset, int(rows.size))


def _clip_windows(token_counts: np.ndarray, window: int) -> np.ndarray:
    """Attention window lengths: `window` tokens at a time, restarting at every clip."""
    clip, index = _segments(token_counts, window)
    return np.minimum(window, token_counts[clip] - index * window)  # [W]


def _windows(lengths: np.ndarray, max_window: int, masked: bool) -> dict[str, object]:
    """Windows of `lengths` consecutive rows, laid out `max_window` slots each for the padded attention path."""
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])  # [W + 1]
    slots = np.arange(max_window)[None, :]  # [1, L]
    valid = slots < lengths[:, None]  # [W, L]
    # An empty slot reads row 0: as a key it is masked out, as a query its output is dropped; no zero row needed.
    window_index = np.where(valid, cu_seqlens[:-1, None] + slots, 0)
    return dict(
        cu_seqlens=_int32(cu_seqlens),
        max_window=max_window,
        window_index=_int32(window_index),
        window_valid=None if valid.all() and not masked else torch.from_numpy(valid),
        token_slot=_int32(np.flatnonzero(valid)),  # row-major slot of each row = packed order
    )
