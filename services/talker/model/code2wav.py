"""Code2Wav: codec frames (G, T) -> 24 kHz waveform, one streamed chunk step, and the reference's offline chunking."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from services.talker.model.code2wav_layers import CausalConv, CausalTransConv, ConvNeXt, DecoderBlock, SnakeBeta
from services.talker.model.code2wav_transformer import PreTransformer
from services.talker.model.config import Code2WavConfig

if TYPE_CHECKING:
    from services.talker.model.code2wav_graphs import Code2WavGraphs


class StreamStep(NamedTuple):
    """One batched chunk: waveform `(B, samples)`, window cache after it, the vocoder's input `(B, C + n, dim)`."""

    wav: torch.Tensor
    past: torch.Tensor
    hidden: torch.Tensor


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
        # row v: the last v of the window-1 cached positions hold real frames (a stream's first v frames)
        cached = cfg.sliding_window - 1
        valid = torch.arange(cached)[None, :] >= cached - torch.arange(cached + 1)[:, None]
        self.register_buffer("window_valid_rows", valid, persistent=False)
        self.graphs: Code2WavGraphs | None = None  # set by enable_cuda_graphs: streamed chunks replay CUDA graphs

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

    def conv_receptive_frames(self) -> int:
        """Frames of pre-transformer output the convolution stack looks back over (11 for the real model).

        Each causal conv of span S at a stage with r samples per frame looks back (S-1)/r frames; the
        transposed convs only look ahead. One more frame covers the held-back tail of the previous call.
        """
        frames, rate = 0.0, 1
        for factor in self.cfg.upsampling_ratios:
            rate *= factor
            frames += 6 / rate  # ConvNeXt depthwise k7
        frames += 6 / rate  # the decoder's input conv k7
        for r in self.cfg.upsample_rates:
            rate *= r
            frames += sum((7 - 1) * d for d in (1, 3, 9)) / rate  # residual units' k7 convs
        frames += 6 / rate  # the output conv k7
        return math.ceil(frames) + 1

    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        """codes `(B, G, T)` -> mean of the G codebook embeddings `(B, T, dim)`."""
        if codes.shape[1] != self.cfg.num_quantizers:
            raise ValueError(f"codes have {codes.shape[1]} codebooks; Code2Wav needs {self.cfg.num_quantizers}")
        return self.code_embedding(codes + self.code_offset).mean(dim=1)  # (B, G, T, dim) -> (B, T, dim)

    def vocode(self, hidden: torch.Tensor) -> torch.Tensor:
        """Pre-transformer output `(B, T, dim)` -> waveform `(B, 1, output_length(T))` in [-1, 1]."""
        # (B, dim, T), channels first and contiguous: a transposed view would send cuDNN down its channels-last
        # path, and every conv after it would inherit that layout
        x = hidden.transpose(1, 2).contiguous()
        for stages in self.upsample:
            for stage in stages:
                x = stage(x)
        *blocks, act, conv_out = self.decoder
        for stage in blocks:
            x = stage(x)
        return conv_out(act(x, conv_out.left), padded=True).clamp(-1.0, 1.0)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes `(B, G, T)` int -> waveform `(B, 1, output_length(T))`: one full, offline decode."""
        hidden, _ = self.pre_transformer(self.embed(codes))
        return self.vocode(hidden)

    # --- streaming ---------------------------------------------------------------------------------------------

    def empty_window(self) -> torch.Tensor:
        """A stream's window cache before its first frame: `(layers, 2, 1, KVH, window-1, D)` zeros (all masked)."""
        cfg = self.cfg
        shape = (cfg.num_layers, 2, 1, cfg.num_kv_heads, cfg.sliding_window - 1, cfg.head_dim)
        return self.code_offset.new_zeros(shape, dtype=self.code_embedding.weight.dtype)

    def window_valid(self, cached: list[int]) -> torch.Tensor:
        """`(B, window-1)` bool: row b marks the last cached[b] positions as real frames (no host-to-device copy)."""
        return torch.stack([self.window_valid_rows[c] for c in cached])

    def stream_step(
        self, codes: torch.Tensor, past: torch.Tensor, past_valid: torch.Tensor, context: torch.Tensor | None
    ) -> StreamStep:
        """One chunk for B streams: codes `(B, G, n)` after a window cache `(layers, 2, B, KVH, window-1, D)` whose
        real positions `past_valid` `(B, window-1)` marks; the vocoder re-runs `context` `(B, C, dim)` first.

        Fixed shapes for fixed (B, n, C) and no host synchronisation: this is what a CUDA graph captures.
        """
        hidden, new_past = self.pre_transformer(self.embed(codes), past, past_valid)
        if context is not None:
            hidden = torch.cat((context, hidden), dim=1)
        return StreamStep(self.vocode(hidden)[:, 0], new_past, hidden)

    def run_stream_step(
        self, codes: torch.Tensor, past: torch.Tensor, past_valid: torch.Tensor, context: torch.Tensor | None
    ) -> StreamStep:
        """`stream_step`, through the CUDA graphs when they are enabled."""
        if self.graphs is not None:
            return self.graphs.run(codes, past, past_valid, context)
        return self.stream_step(codes, past, past_valid, context)

    def enable_cuda_graphs(self, max_batch: int = 32, max_graphs: int = 32, capture: bool = True) -> Code2WavGraphs:
        """Streamed chunks from now on pad their batch to a bucket and replay a graph per (bucket, frames, context).

        `capture=False` keeps the fixed shapes and padding but runs eagerly (the graphs' reference in tests).
        """
        from services.talker.model.code2wav_graphs import Code2WavGraphs

        self.graphs = Code2WavGraphs(self, max_batch, max_graphs, capture)
        return self.graphs
