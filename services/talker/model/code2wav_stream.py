"""Streaming Code2Wav: decode an utterance chunk by chunk as frames arrive, batched across streams."""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from services.talker.model.code2wav import Code2Wav


class StreamingCode2Wav:
    """One utterance's decoder state: a small first chunk for a low time to first audio, larger ones after.

    Each chunk runs the pre-transformer on the new frames only, against a cache of its sliding window, so
    its output is the full decode's; the convolution stack re-runs `left_context` earlier frames before the
    new ones. Only samples that no later frame can change are emitted, so the pieces concatenate, without
    gaps, into a prefix of the full decode; after the final pull they are the full decode. With
    `left_context >= model.conv_receptive_frames()` (11 for the real model) that equality is exact up to
    fp32 rounding; shorter contexts trade a bounded error for less work (tests pin it).

    The window cache always spans `window - 1` positions (the first frames' missing ones masked), so calls
    differ only in (new frames, context frames). With the model's CUDA graphs on, a final short chunk is
    padded to the nominal chunk size: everything is causal, so the emitted samples are unchanged, but the
    stream's cache then holds the padding and the stream is closed to further frames.
    """

    def __init__(self, model: Code2Wav, first_chunk: int, chunk: int, left_context: int) -> None:
        for name, value in (("first_chunk", first_chunk), ("chunk", chunk), ("left_context", left_context)):
            if value < 1:
                raise ValueError(f"StreamingCode2Wav {name}={value}: must be >= 1 frame")
        self.model = model
        self.device = model.code_offset.device  # read per pushed frame: a module attribute lookup is slow
        self.first_chunk, self.chunk, self.left_context = first_chunk, chunk, left_context
        # frames pushed but not decoded yet, one (G,) column each: a chunk stacks them once, where appending each
        # frame to a (G, n) tensor would cost a device op per frame
        self.pending: list[torch.Tensor] = []
        self.num_frames = 0
        self.decoded_frames = 0
        self.emitted = 0  # samples emitted so far
        self.past: torch.Tensor | None = None  # window cache (layers, 2, 1, KVH, window-1, D)
        self.cached = 0  # how many of its last positions hold real frames
        self.context: torch.Tensor | None = None  # (1, <= left_context, dim) last pre-transformer outputs
        self.closed = False  # a padded final chunk consumed the cache

    def push(self, frames: torch.Tensor) -> None:
        """Append frames `(G, n)` (or one frame `(G,)`)."""
        if self.closed:
            raise ValueError("StreamingCode2Wav: frames pushed after the final chunk was flushed")
        if frames.device != self.device or frames.dtype != torch.long:  # the engine's frames are already: no call
            frames = frames.to(self.device, torch.long)
        if frames.ndim == 1:
            self.pending.append(frames)
            self.num_frames += 1
        else:
            self.pending.extend(frames.unbind(1))
            self.num_frames += frames.shape[1]

    def ready_frames(self, final: bool = False) -> int:
        """New frames the next chunk decodes now; 0 until enough arrived (`final`: whatever is left)."""
        size = self.nominal_chunk
        if self.num_frames >= self.decoded_frames + size:
            return size
        return self.num_frames - self.decoded_frames if final else 0

    @property
    def nominal_chunk(self) -> int:
        return self.first_chunk if self.decoded_frames == 0 else self.chunk

    def batch_key(self, final: bool = False) -> tuple[int, int]:
        """Streams with equal keys decode in one batched call: (frames in the call, context frames)."""
        ready = self.ready_frames(final)
        frames = self.nominal_chunk if ready and self.model.graphs is not None else ready
        return frames, 0 if self.context is None else self.context.shape[1]

    def pull(self, final: bool = False) -> list[torch.Tensor]:
        """Decode every chunk that is ready now; `final` flushes the tail."""
        return decode_streams(self.model, [self], final)[0]


class _Group(NamedTuple):
    frames: int  # per call, >= each stream's ready frames
    context: int
    streams: list[StreamingCode2Wav]
    ready: list[int]


@torch.no_grad()
def _decode_group(model: Code2Wav, group: _Group) -> list[torch.Tensor]:
    """One chunk for streams sharing a batch key; returns each stream's new samples."""
    n, streams = group.frames, group.streams
    # (B, G, n) in one stack of every stream's frames: a short final chunk is padded with code 0 after its last frame
    columns: list[torch.Tensor] = []
    for s, r in zip(streams, group.ready):
        columns += s.pending[:r]
        if r < n:
            columns += [torch.zeros_like(s.pending[0])] * (n - r)
    codes = torch.stack(columns).view(len(streams), n, -1).transpose(1, 2)
    if group.context:
        past = torch.cat([s.past for s in streams], dim=2)  # type: ignore[misc]
        context: torch.Tensor | None = torch.cat([s.context for s in streams])  # type: ignore[misc]
    else:  # fresh streams: nothing cached, nothing to re-vocode
        past, context = model.empty_window().expand(-1, -1, len(streams), -1, -1, -1), None
    step = model.run_stream_step(codes, past, model.window_valid([s.cached for s in streams]), context)
    pieces = []
    for b, (s, r) in enumerate(zip(streams, group.ready)):
        first = s.decoded_frames - group.context  # frame index of wav[b, 0]
        end = s.decoded_frames + r
        emit_to = end * model.samples_per_frame - model.held_back
        offset = first * model.samples_per_frame
        pieces.append(step.wav[b, s.emitted - offset : emit_to - offset])
        del s.pending[:r]
        s.decoded_frames, s.emitted = end, emit_to
        if r < n:  # the cache and context now include the padding
            s.past, s.context, s.closed = None, None, True
        else:
            s.past, s.cached = step.past[:, :, b : b + 1], min(s.cached + n, step.past.shape[4])
            s.context = step.hidden[b : b + 1, -s.left_context :]
    return pieces


def _groups(
    model: Code2Wav, streams: Sequence[StreamingCode2Wav], finals: Sequence[bool]
) -> list[tuple[tuple[int, int], list[int]]]:
    """(batch key, stream indices) of every stream with a chunk ready, split to the graphs' largest batch."""
    by_key: dict[tuple[int, int], list[int]] = {}
    for i, (s, fin) in enumerate(zip(streams, finals)):
        key = s.batch_key(fin)
        if key[0] > 0:
            by_key.setdefault(key, []).append(i)
    limit = model.graphs.max_batch if model.graphs is not None else len(streams)
    return [(key, idx[k : k + limit]) for key, idx in by_key.items() for k in range(0, len(idx), limit)]


def decode_streams(
    model: Code2Wav, streams: Sequence[StreamingCode2Wav], final: bool | Sequence[bool] = False
) -> list[list[torch.Tensor]]:
    """Decode every ready chunk of every stream, batching streams whose chunk shapes agree.

    Returns, per stream, its new waveform pieces in order (possibly none). `final` (per stream or for all)
    flushes a finished utterance's tail.
    """
    finals = [final] * len(streams) if isinstance(final, bool) else list(final)
    out: list[list[torch.Tensor]] = [[] for _ in streams]
    while True:
        groups = _groups(model, streams, finals)
        if not groups:
            return out
        for (n, context), idx in groups:
            members = [streams[i] for i in idx]
            group = _Group(n, context, members, [s.ready_frames(finals[i]) for s, i in zip(members, idx)])
            for i, piece in zip(idx, _decode_group(model, group)):
                out[i].append(piece)
