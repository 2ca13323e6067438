"""Code2Wav: codec frames (G, T) -> 24 kHz waveform; the reference's chunked decode and our streaming decoder."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from services.talker.model.code2wav_layers import CausalConv, CausalTransConv, ConvNeXt, DecoderBlock, PreTransformer, SnakeBeta
from services.talker.model.config import Code2WavConfig


class Code2Wav(nn.Module):
    """`code2wav.*`: mean of per-codebook embeddings -> pre-transformer -> 2x upsample stages -> SnakeBeta decoder."""

    def __init__(self, cfg: Code2WavConfig) -> None:
        super().__init__()
        self.cfg = cfg
        dim = cfg.hidden_size
        self.code_embedding = nn.Embedding(cfg.codebook_size * cfg.num_quantizers, dim)
        self.pre_transformer = PreTransformer(cfg)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalTransConv(dim, dim, f, f), ConvNeXt(dim)]) for f in cfg.upsampling_ratios
        )
        widths = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        decoder: list[nn.Module] = [CausalConv(dim, widths[0], 7)]
        decoder += [DecoderBlock(widths[i], widths[i + 1], r) for i, r in enumerate(cfg.upsample_rates)]
        decoder += [SnakeBeta(widths[-1]), CausalConv(widths[-1], 1, 7)]
        self.decoder = nn.ModuleList(decoder)
        offsets = torch.arange(cfg.num_quantizers).view(1, -1, 1) * cfg.codebook_size
        self.register_buffer("code_offset", offsets, persistent=False)

    @property
    def samples_per_frame(self) -> int:
        return self.cfg.samples_per_frame

    def output_length(self, num_frames: int) -> int:
        """Samples one call on `num_frames` frames yields: trans-convs drop what would need the next frame."""
        length = num_frames
        for factor in self.cfg.upsampling_ratios:
            length *= factor
        for rate in self.cfg.upsample_rates:
            length = (length - 1) * rate
        return length

    @property
    def held_back(self) -> int:
        """Samples at the end of every call that only the next frame completes (555 for the real model)."""
        return self.samples_per_frame - self.output_length(1)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes `(B, G, T)` int -> waveform `(B, 1, output_length(T))` in [-1, 1]."""
        if codes.shape[1] != self.cfg.num_quantizers:
            raise ValueError(f"codes have {codes.shape[1]} codebooks; Code2Wav needs {self.cfg.num_quantizers}")
        x = self.code_embedding(codes + self.code_offset).mean(dim=1)  # (B, G, T, dim) -> (B, T, dim)
        x = self.pre_transformer(x).transpose(1, 2)  # (B, dim, T): channels first for the convolutions
        for stages in self.upsample:
            for stage in stages:
                x = stage(x)
        for stage in self.decoder:
            x = stage(x)
        return x.clamp(-1.0, 1.0)


def chunked_decode(model: Code2Wav, codes: torch.Tensor, chunk_size: int = 300, left_context: int = 25) -> torch.Tensor:
    """The reference's offline chunking: decode `[start - ctx, end)`, drop the context's samples, concatenate.

    Each chunk's held-back tail is never produced, so the result is `held_back` samples shorter per chunk
    than a full decode; kept as is because `generate` in transformers produces exactly this.
    """
    pieces = []
    start, total = 0, codes.shape[-1]
    while start < total:
        end = min(start + chunk_size, total)
        ctx = min(left_context, start)
        wav = model(codes[..., start - ctx : end])
        pieces.append(wav[..., ctx * model.samples_per_frame :])
        start = end
    return torch.cat(pieces, dim=-1)


@dataclass(frozen=True)
class DecodeWindow:
    """One Code2Wav call of a stream: frames `[first_frame, first_frame + n)` and which samples of it are new."""

    codes: torch.Tensor  # (G, n)
    first_frame: int
    emit_from: int  # absolute sample index (in the whole utterance) of the first sample to emit
    emit_to: int  # absolute sample index one past the last sample to emit


class StreamingCode2Wav:
    """Decodes one utterance as frames arrive: a small first chunk for a low time to first audio, larger ones after.

    Every call decodes the new frames plus `left_context` earlier ones and emits exactly the samples that
    are final: the concatenation of all emitted pieces is a prefix of a full decode (no gap at chunk
    boundaries, unlike `chunked_decode`), differing from it only where `left_context` is shorter than the
    pre-transformer's receptive field; after `finish` it has the full decode's length.
    For batching across streams, call `next_window` on each, decode windows of equal length together,
    and hand each its waveform with `take`.
    """

    def __init__(self, model: Code2Wav, first_chunk: int, chunk: int, left_context: int) -> None:
        for name, value in (("first_chunk", first_chunk), ("chunk", chunk), ("left_context", left_context)):
            if value < 1:
                raise ValueError(f"StreamingCode2Wav {name}={value}: must be >= 1 frame")
        self.model = model
        self.first_chunk, self.chunk, self.left_context = first_chunk, chunk, left_context
        self.codes = torch.empty(model.cfg.num_quantizers, 0, dtype=torch.long)
        self.decoded_frames = 0
        self.emitted = 0  # samples emitted so far

    @property
    def num_frames(self) -> int:
        return self.codes.shape[1]

    def push(self, frames: torch.Tensor) -> None:
        """Append frames `(G, n)` (or one frame `(G,)`)."""
        frames = frames if frames.dim() == 2 else frames[:, None]
        self.codes = torch.cat((self.codes.to(frames.device), frames.long()), dim=1)

    def next_window(self, final: bool = False) -> DecodeWindow | None:
        """The next call to make, or None until enough frames arrived (`final`: decode whatever is left)."""
        size = self.first_chunk if self.decoded_frames == 0 else self.chunk
        end = self.decoded_frames + size
        if self.num_frames < end:
            if not final or self.num_frames == self.decoded_frames:
                return None
            end = self.num_frames
        first = max(0, self.decoded_frames - self.left_context)
        emit_to = end * self.model.samples_per_frame - self.model.held_back
        return DecodeWindow(self.codes[:, first:end], first, self.emitted, emit_to)

    def take(self, window: DecodeWindow, wav: torch.Tensor) -> torch.Tensor:
        """The new samples `(n,)` of a decoded window (`wav` as `model` returns it for this row)."""
        offset = window.first_frame * self.model.samples_per_frame
        piece = wav.reshape(-1)[window.emit_from - offset : window.emit_to - offset]
        self.decoded_frames = window.first_frame + window.codes.shape[1]
        self.emitted = window.emit_to
        return piece

    @torch.no_grad()
    def pull(self, final: bool = False) -> list[torch.Tensor]:
        """Decode every window that is ready now, one stream at a time; `final` flushes the tail."""
        pieces = []
        while (window := self.next_window(final)) is not None:
            pieces.append(self.take(window, self.model(window.codes[None])[0]))
        return pieces


@torch.no_grad()
def decode_windows(model: Code2Wav, windows: list[DecodeWindow]) -> list[torch.Tensor]:
    """Decode many streams' windows, batching those of equal length into one call; waveforms in input order."""
    out: list[torch.Tensor | None] = [None] * len(windows)
    by_length: dict[int, list[int]] = {}
    for i, w in enumerate(windows):
        by_length.setdefault(w.codes.shape[1], []).append(i)
    for idx in by_length.values():
        wavs = model(torch.stack([windows[i].codes for i in idx]))  # (b, 1, S)
        for i, wav in zip(idx, wavs):
            out[i] = wav
    return [w for w in out if w is not None]
