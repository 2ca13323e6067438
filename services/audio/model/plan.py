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

import torch

from services.audio.lengths import audio_token_count, stem_output_length
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


@dataclass(frozen=True)
class _Chunk:
    start: int  # first frame in the packed mel
    frames: int
    conv_frames: int  # length the chunk is convolved at: a full chunk, or a short clip's own length


def plan_batch(
    frame_counts: list[int] | tuple[int, ...],
    config: AudioEncoderConfig,
    chunks_per_launch: int = DEFAULT_CHUNKS_PER_LAUNCH,
) -> AudioBatchPlan:
    """The plan for clips of `frame_counts` mel frames, packed in that order. Pure host work; no device is touched."""
    if not frame_counts:
        raise ValueError("plan_batch needs at least one clip")
    if min(frame_counts) < 1:
        raise ValueError(f"every clip needs at least one mel frame, got frame_counts={list(frame_counts)}")
    if chunks_per_launch < 1:
        raise ValueError(f"chunks_per_launch must be >= 1, got {chunks_per_launch}")
    chunk = config.chunk_frames
    token_counts = tuple(audio_token_count(t, chunk) for t in frame_counts)
    chunks = _chunks(frame_counts, chunk)
    total_frames = sum(frame_counts)
    launches: list[ConvLaunch] = []
    offset = 0
    for first in range(0, len(chunks), chunks_per_launch):
        launch = _launch(chunks[first:first + chunks_per_launch], total_frames, offset)
        launches.append(launch)
        offset += launch.num_tokens
    return AudioBatchPlan(tuple(frame_counts), token_counts, tuple(launches), **_windows(token_counts, config))


def _chunks(frame_counts: list[int] | tuple[int, ...], chunk: int) -> list[_Chunk]:
    chunks: list[_Chunk] = []
    start = 0
    for frames in frame_counts:
        conv_frames = min(frames, chunk)
        for begin in range(0, frames, chunk):
            chunks.append(_Chunk(start + begin, min(chunk, frames - begin), conv_frames))
        start += frames
    return chunks


def _launch(chunks: list[_Chunk], total_frames: int, token_offset: int) -> ConvLaunch:
    pad = max(c.conv_frames for c in chunks)
    slots = torch.arange(pad)
    starts = torch.tensor([c.start for c in chunks])[:, None]  # [K, 1]
    frames = torch.tensor([c.frames for c in chunks])[:, None]  # [K, 1]
    frame_index = torch.where(slots < frames, starts + slots, total_frames).reshape(-1)  # [K * pad]
    masks = None
    if any(c.conv_frames < pad for c in chunks):
        lengths = torch.tensor([c.conv_frames for c in chunks])[:, None]  # [K, 1]
        masks = tuple(
            (torch.arange(-(-pad // s)) < -(-lengths // s)).float().reshape(len(chunks), 1, 1, -1) for s in (2, 4)
        )
    stem = stem_output_length(pad)
    valid = torch.arange(stem) < -(-frames // 8)  # [K, stem]
    num_tokens = int(valid.sum())
    token_index = None if num_tokens == valid.numel() else valid.reshape(-1).nonzero().squeeze(1)
    return ConvLaunch(len(chunks), pad, frame_index, masks, token_index, token_offset, num_tokens)


def _windows(token_counts: tuple[int, ...], config: AudioEncoderConfig) -> dict[str, object]:
    window = config.window_tokens
    lengths: list[int] = []
    for n in token_counts:
        lengths += [window] * (n // window) + ([n % window] if n % window else [])
    lens = torch.tensor(lengths)  # [W]
    cu_seqlens = torch.nn.functional.pad(lens.cumsum(0), (1, 0)).to(torch.int32)  # [W + 1]
    max_window = max(lengths)
    slots = torch.arange(max_window)[None, :]  # [1, max_window]
    valid = slots < lens[:, None]  # [W, max_window]
    # An empty slot reads token 0: as a key it is masked out, as a query its output is dropped; no zero row needed.
    window_index = torch.where(valid, cu_seqlens[:-1, None].long() + slots, 0)
    token_slot = (torch.arange(len(lengths))[:, None] * max_window + slots)[valid]  # [N], in packed order
    return dict(
        cu_seqlens=cu_seqlens,
        max_window=max_window,
        window_index=window_index,
        window_valid=None if bool(valid.all()) else valid,
        token_slot=token_slot,
    )
