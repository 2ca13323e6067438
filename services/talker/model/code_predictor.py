"""The code predictor: a small dense decoder that fills codebooks 1..G-1 of a frame, one fresh short cache per frame."""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import nn

from services.talker.model.config import CodePredictorConfig
from services.talker.model.layers import QKNormAttention, RMSNorm, SwiGLU, attend, inv_frequencies, rope_cos_sin

# (group g in 1..G-1, logits (B, V)) -> chosen codes (B,)
PickFn = Callable[[int, torch.Tensor], torch.Tensor]


class Residuals(NamedTuple):
    codes: torch.Tensor  # (B, G-1): codebooks 1..G-1 of the frame
    embed_sum: torch.Tensor  # (B, dim): talker embedding of code 0 plus every residual's embedding


class PredictorAttention(QKNormAttention):
    def __init__(self, cfg: CodePredictorConfig) -> None:
        super().__init__(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], cache: list[torch.Tensor] | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        q, k, v = self.project(x, cos_sin)
        if cache is not None:
            k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
        # every row sits at the same position, so plain causal attention (prefill) or attend-all (one new token)
        return self.output(attend(q, k, v, None, causal=x.shape[1] > 1)), [k, v]


class PredictorLayer(nn.Module):
    def __init__(self, cfg: CodePredictorConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = PredictorAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)


class CodePredictor(nn.Module):
    """`talker.code_predictor.*`; parameter names follow the checkpoint with `model.` dropped."""

    def __init__(self, cfg: CodePredictorConfig) -> None:
        super().__init__()
        self.cfg = cfg
        groups = cfg.num_code_groups - 1
        self.layers = nn.ModuleList(PredictorLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.codec_embedding = nn.ModuleList(nn.Embedding(cfg.vocab_size, cfg.hidden_size) for _ in range(groups))
        self.lm_head = nn.ModuleList(nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(groups))
        self.register_buffer("inv_freq", inv_frequencies(cfg.head_dim, cfg.rope_theta), persistent=False)

    def _forward(
        self, x: torch.Tensor, start: int, caches: list[list[torch.Tensor] | None]
    ) -> tuple[torch.Tensor, list[list[torch.Tensor] | None]]:
        positions = torch.arange(start, start + x.shape[1], device=x.device)[None]  # (1, T), shared by all rows
        cos_sin = rope_cos_sin(positions, self.inv_freq, x.dtype)
        new_caches: list[list[torch.Tensor] | None] = []
        for layer, cache in zip(self.layers, caches):
            h, cache = layer.self_attn(layer.input_layernorm(x), cos_sin, cache)
            x = x + h
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            new_caches.append(cache)
        return self.norm(x), new_caches

    def predict(self, past_hidden: torch.Tensor, code0_embed: torch.Tensor, pick: PickFn) -> Residuals:
        """Codebooks 1..G-1 for B rows from the talker's last normed hidden `(B, dim)` and code 0's embedding.

        Position 0 is the talker hidden, 1 the code-0 embedding; codebook g is read by `lm_head[g-1]` after
        the embedding of codebook g-1 (so the cache holds at most G+1 positions and dies with the frame).
        """
        x = torch.stack((past_hidden, code0_embed), dim=1)  # (B, 2, dim)
        caches: list[list[torch.Tensor] | None] = [None] * len(self.layers)
        embeds = [code0_embed]
        codes = []
        start = 0
        for g in range(1, self.cfg.num_code_groups):
            h, caches = self._forward(x, start, caches)
            start += x.shape[1]
            code = pick(g, self.lm_head[g - 1](h[:, -1]))
            codes.append(code)
            embeds.append(self.codec_embedding[g - 1](code))
            x = embeds[-1][:, None]  # (B, 1, dim)
        return Residuals(torch.stack(codes, dim=1), torch.stack(embeds, dim=1).sum(dim=1))
