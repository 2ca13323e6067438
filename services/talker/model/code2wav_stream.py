"""Streaming Code2Wav: decode an utterance chunk by chunk as frames arrive, batched across streams."""
from __future__ import annotations

from typing import Sequence

import torch

from services.talker.model.code2wav import Code2Wav
from services.talker.model.code2wav_layers import WindowCache


class StreamingCode2Wav:
    """One utterance's decoder state: a small first chunk for a low time to first audio, larger ones after.

    Each chunk runs the pre-transformer on the new frames only, against a cache of its sliding window, so
    its output is the full decode's; the convolution stack re-runs `left_context` earlier frames before the
    new ones. Only samples that no later frame can change are emitted, so the pieces concatenate, without
    gaps, into a prefix of the full decode; after the final pull they are the full decode. With
    `left_context >= model.conv_receptive_frames()` (11 for the real model) that equality is exact up to
    fp32 rounding; shorter contexts trade a bounded error for less work (tests pin it).
    """

    def __init__(self, model: Code2Wav, first_chunk: int, chunk: int, left_context: int) -> None:
        for name, value in (("first_chunk", first_chunk), ("chunk", chunk), ("left_context", left_context)):
            if value < 1:
                raise ValueError(f"StreamingCode2Wav {name}={value}: must be >= 1 frame")
        self.model = model
        self.first_chunk, self.chunk, self.left_context = first_chunk, chunk, left_context
        self.codes = torch.empty(model.cfg.num_quantizers, 0, dtype=torch.long, device=model.code_offset.device)
        self.decoded_frames = 0
        self.emitted = 0  # samples emitted so far
        self.past: WindowCache | None = None  # pre-transformer window cache, batch dim 1
        self.context: torch.Tensor | None = None  # (1, <= left_context, dim) last pre-transformer outputs

    @property
    def num_frames(self) -> int:
        return self.codes.shape[1]

    def push(self, frames: torch.Tensor) -> None:
        """Append frames `(G, n)` (or one frame `(G,)`)."""
        frames = frames if frames.dim() == 2 else frames[:, None]
        self.codes = torch.cat((self.codes, frames.to(self.codes.device, torch.long)), dim=1)

    def ready_frames(self, final: bool = False) -> int:
        """New frames the next chunk decodes now; 0 until enough arrived (`final`: whatever is left)."""
        size = self.first_chunk if self.decoded_frames == 0 else self.chunk
        if self.num_frames >= self.decoded_frames + size:
            return size
        return self.num_frames - self.decoded_frames if final else 0

    def batch_key(self, final: bool = False) -> tuple[int, int, int]:
        """Streams with equal keys decode in one batched call: (new frames, cached positions, context frames)."""
        cached = 0 if self.past is None else self.past[0][0].shape[2]
        context = 0 if self.context is None else self.context.shape[1]
        return self.ready_frames(final), cached, context

    def pull(self, final: bool = False) -> list[torch.Tensor]:
        """Decode every chunk that is ready now; `final` flushes the tail."""
        return decode_streams(self.model, [self], final)[0]


@torch.no_grad()
def _decode_group(model: Code2Wav, streams: Sequence[StreamingCode2Wav], n: int) -> list[torch.Tensor]:
    """One chunk of n new frames for streams sharing a batch key; returns each stream's new samples."""
    codes = torch.stack([s.codes[:, s.decoded_frames : s.decoded_frames + n] for s in streams])  # (B, G, n)
    past: WindowCache | None = None
    if streams[0].past is not None:
        per_stream = [s.past for s in streams if s.past is not None]
        past = [(torch.cat([p[i][0] for p in per_stream]), torch.cat([p[i][1] for p in per_stream]))
                for i in range(len(per_stream[0]))]  # fmt: skip
    hidden, new_past = model.pre_transformer(model.embed(codes), past)
    if streams[0].context is not None:
        hidden = torch.cat((torch.cat([s.context for s in streams]), hidden), dim=1)  # type: ignore[misc]
    wav = model.vocode(hidden)[:, 0]  # (B, samples)
    pieces = []
    for b, s in enumerate(streams):
        first = s.decoded_frames - (hidden.shape[1] - n)  # frame index of wav[b, 0]
        end = s.decoded_frames + n
        emit_to = end * model.samples_per_frame - model.held_back
        offset = first * model.samples_per_frame
        pieces.append(wav[b, s.emitted - offset : emit_to - offset])
        s.decoded_frames, s.emitted = end, emit_to
        s.past = [(k[b : b + 1], v[b : b + 1]) for k, v in new_past]
        s.context = hidden[b : b + 1, -s.left_context :]
    return pieces


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
        groups: dict[tuple[int, int, int], list[int]] = {}
        for i, (s, fin) in enumerate(zip(streams, finals)):
            key = s.batch_key(fin)
            if key[0] > 0:
                groups.setdefault(key, []).append(i)
        if not groups:
            return out
        for (n, _, _), idx in groups.items():
            for i, piece in zip(idx, _decode_group(model, [streams[i] for i in idx], n)):
                out[i].append(piece)
