"""Host-side batch plan for the AuT encoder: every index, mask and `cu_seqlens` the forward needs, from lengths alone.

Semantics (one clip's output never depends on what it is batched with): each clip is cut into chunks of
`chunk_frames` (100) mel frames. A clip of at least one chunk pads its tail chunk with zeros to a full chunk; a
shorter clip is convolved at its own length. Both are exactly what transformers does for that clip alone (it pads
every chunk of a batch to the batch's longest chunk, so in a mixed batch its short clips see extra padding; ours do
not). A launch may still pad a short clip's chunk for batching: the stem masks it back after each convolution,
which is the same as convolving it unpadded.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from runtime.audio_lengths import audio_token_count, stem_output_length
from services.audio.model.config import AudioEncoderConfig
from services.audio.transfer import to_device_many

DEFAULT_CHUNKS_PER_LAUNCH = 64  # bounds the conv stem's working set (~6 MB of bf16 activations per chunk at real dims)


@dataclass(frozen=True)
class ConvLaunch:
    """One conv-stem launch over consecutive chunks, all padded to `pad_frames` frames."""

    num_chunks: int
    pad_frames: int
    frame_index: torch.Tensor  # int64 [num_chunks * pad_frames]: packed mel frame, or total_frames for a zero
    masks: tuple[torch.Tensor, torch.Tensor] | None  # [K, 1, 1, ceil(pad/2)], [K, 1, 1, ceil(pad/4)]; None: unneeded
    token_index: torch.Tensor | None  # int64 [num_tokens]: kept rows of [num_chunks * stem tokens]; None: all rows
    token_offset: int  # first packed token this launch writes
    num_tokens: int

    @property
    def stem_tokens(self) -> int:
        return stem_output_length(self.pad_frames)


@dataclass(frozen=True)
class AudioBatchPlan:
    """Everything about a batch of clips that follows from their frame counts; built on the host, moved once."""

    frame_counts: tuple[int, ...]
    token_counts: tuple[int, ...]
    launches: tuple[ConvLaunch, ...]
    cu_seqlens: torch.Tensor  # int32 [windows + 1]: attention windows over the packed tokens
    max_window: int  # longest window, a host int so attention needs no sync
    window_index: torch.Tensor  # int64 [windows, max_window]: packed token per slot; 0 (masked, dropped) if empty
    window_valid: torch.Tensor | None  # bool [windows, max_window]; None when every window is full
    token_slot: torch.Tensor  # int64 [num_tokens]: each token's flat slot in [windows * max_window]

    @property
    def total_frames(self) -> int:
        return sum(self.frame_counts)

    @property
    def num_tokens(self) -> int:
        return sum(self.token_counts)

    @property
    def num_windows(self) -> int:
        return self.cu_seqlens.shape[0] - 1

    def to(self, device: torch.device | str, dtype: torch.dtype) -> AudioBatchPlan:
        """This plan with its tensors on `device` (masks in `dtype`), in one copy per dtype, not blocking the host."""
        device = torch.device(device)
        tensors, rebuild = self._flatten()
        return rebuild(to_device_many(tensors, device), dtype)

    def _flatten(self) -> tuple[list[torch.Tensor], Callable[[list[torch.Tensor], torch.dtype], AudioBatchPlan]]:
        """Every tensor of the plan in a fixed order, and how to put moved ones back (None fields stay None)."""
        fields: list[torch.Tensor | None] = [self.cu_seqlens, self.window_index, self.window_valid, self.token_slot]
        for launch in self.launches:
            masks = launch.masks or (None, None)
            fields += [launch.frame_index, launch.token_index, *masks]
        present = [t for t in fields if t is not None]

        def rebuild(moved: list[torch.Tensor], dtype: torch.dtype) -> AudioBatchPlan:
            it = iter(moved)
            out = [None if t is None else next(it) for t in fields]
            launches = []
            for i, launch in enumerate(self.launches):
                frame_index, token_index, mask1, mask2 = out[4 + 4 * i: 8 + 4 * i]
                masks = None if mask1 is None else (mask1.to(dtype), mask2.to(dtype))
                launches.append(dataclasses.replace(launch, frame_index=frame_index, token_index=token_index,
                                                    masks=masks))
            cu_seqlens, window_index, window_valid, token_slot = out[:4]
            return dataclasses.replace(self, launches=tuple(launches), cu_seqlens=cu_seqlens,
                                       window_index=window_index, window_valid=window_valid, token_slot=token_slot)

        return present, rebuild


def plan_batch(
    frame_counts: list[int] | tuple[int, ...],
    config: AudioEncoderConfig,
    chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH,
) -> AudioBatchPlan:
    """The plan for clips of `frame_counts` mel frames, packed in that order. Pure host work (numpy, vectorised:
    it sits on the latency path of every forward); no device is touched."""
    if len(frame_counts) == 0:
        raise ValueError("plan_batch needs at least one clip")
    if min(frame_counts) < 1:
        raise ValueError(f"every clip needs at least one mel frame, got frame_counts={list(frame_counts)}")
    if chunks_per_launch < 1:
        raise ValueError(f"chunks_per_launch must be >= 1, got {chunks_per_launch}")
    chunk = config.chunk_frames
    frames = np.asarray(frame_counts, dtype=np.int64)
    token_counts = tuple(audio_token_count(int(t), chunk) for t in frames)
    start, length, conv_length = _chunks(frames, chunk)
    total_frames = int(frames.sum())
    launches: list[ConvLaunch] = []
    offset = 0
    for first in range(0, start.shape[0], chunks_per_launch):
        part = slice(first, first + chunks_per_launch)
        launch = _launch(start[part], length[part], conv_length[part], total_frames, offset)
        launches.append(launch)
        offset += launch.num_tokens
    return AudioBatchPlan(tuple(int(t) for t in frames), token_counts, tuple(launches),
                          **_windows(np.asarray(token_counts), config.window_tokens))


def _ceil_div(a: np.ndarray | int, b: int) -> np.ndarray:
    return -(-np.asarray(a) // b)


def _segments(lengths: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut each of `lengths` into pieces of `size` (the last shorter): (owner of each piece, piece index in owner)."""
    pieces = _ceil_div(lengths, size)  # [B]
    owner = np.repeat(np.arange(lengths.shape[0]), pieces)  # [P]
    index = np.arange(owner.shape[0]) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # [P]
    return owner, index


def _chunks(frames: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk: first packed frame, frames, and the length it is convolved at (a full chunk or a short clip's own)."""
    clip, index = _segments(frames, chunk)
    clip_start = np.cumsum(frames) - frames  # [B]
    start = clip_start[clip] + index * chunk
    length = np.minimum(chunk, frames[clip] - index * chunk)
    conv_length = np.minimum(frames, chunk)[clip]
    return start, length, conv_length


def _launch(start: np.ndarray, length: np.ndarray, conv_length: np.ndarray, total_frames: int,
            token_offset: int) -> ConvLaunch:
    pad = int(conv_length.max())
    slots = np.arange(pad)[None, :]  # [1, P]
    frame_index = np.where(slots < length[:, None], start[:, None] + slots, total_frames).reshape(-1)  # [K * P]
    masks = None
    if (conv_length < pad).any():
        masks = tuple(
            torch.from_numpy(
                (np.arange(_ceil_div(pad, s)) < _ceil_div(conv_length, s)[:, None]).astype(np.float32)
            ).view(-1, 1, 1, int(_ceil_div(pad, s)))
            for s in (2, 4)
        )
    valid = np.arange(stem_output_length(pad))[None, :] < _ceil_div(length, 8)[:, None]  # [K, stem tokens]
    num_tokens = int(valid.sum())
    token_index = None if num_tokens == valid.size else torch.from_numpy(np.flatnonzero(valid))
    return ConvLaunch(start.shape[0], pad, torch.from_numpy(frame_index), masks, token_index, token_offset,
                      num_tokens)


def _windows(token_counts: np.ndarray, window: int) -> dict[str, object]:
    clip, index = _segments(token_counts, window)
    lengths = np.minimum(window, token_counts[clip] - index * window)  # [W]
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)  # [W + 1]
    max_window = int(lengths.max())
    slots = np.arange(max_window)[None, :]  # [1, L]
    valid = slots < lengths[:, None]  # [W, L]
    # An empty slot reads token 0: as a key it is masked out, as a query its output is dropped; no zero row needed.
    window_index = np.where(valid, cu_seqlens[:-1, None].astype(np.int64) + slots, 0)
    return dict(
        cu_seqlens=torch.from_numpy(cu_seqlens),
        max_window=max_window,
        window_index=torch.from_numpy(window_index),
        window_valid=None if valid.all() else torch.from_numpy(valid),
        token_slot=torch.from_numpy(np.flatnonzero(valid)),  # row-major slot of each token = packed order
    )
