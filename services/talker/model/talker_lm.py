"""The Talker MoE decoder: codec embedding, M-RoPE attention with q/k RMSNorm, MoE layers, codec head, projections."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from services.talker.model.config import TalkerLMConfig
from services.talker.model.kv import KVPool, causal_mask
from services.talker.model.layers import (
    QKNormAttention, RMSNorm, attend, inv_frequencies, mrope_axis_of_frequency, mrope_cos_sin,
)
from services.talker.model.moe import TalkerMoE


class ResizeMLP(nn.Module):
    """Thinker width -> talker width: Linear -> SiLU -> Linear, with biases (`text_projection`, `hidden_projection`)."""

    def __init__(self, dim_in: int, hidden: int, dim_out: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(dim_in, hidden, bias=True)
        self.linear_fc2 = nn.Linear(hidden, dim_out, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class TalkerAttention(QKNormAttention):
    def __init__(self, cfg: TalkerLMConfig) -> None:
        super().__init__(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        kv: KVPool,
        layer: int,
        slots: torch.Tensor,
        start: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        q, k, v = self.project(x, cos_sin)
        kv.write(layer, slots, start, k, v)
        k_all, v_all = kv.read(layer, slots, mask.shape[-1])
        return self.output(attend(q, k_all, v_all, mask))


class TalkerLayer(nn.Module):
    def __init__(self, cfg: TalkerLMConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = TalkerAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = TalkerMoE(
            cfg.hidden_size,
            cfg.num_experts,
            cfg.num_experts_per_tok,
            cfg.moe_intermediate_size,
            cfg.shared_expert_intermediate_size,
            cfg.norm_topk_prob,
        )


class TalkerLM(nn.Module):
    """`talker.*` minus the code predictor. Parameter names follow the checkpoint with `model.` dropped."""

    def __init__(self, cfg: TalkerLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TalkerLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.text_projection = ResizeMLP(cfg.thinker_hidden_size, cfg.projection_size, cfg.hidden_size)
        self.hidden_projection = ResizeMLP(cfg.thinker_hidden_size, cfg.projection_size, cfg.hidden_size)
        self.register_buffer("inv_freq", inv_frequencies(cfg.head_dim, cfg.rope_theta), persistent=False)
        self.register_buffer(
            "freq_axis", mrope_axis_of_frequency(cfg.mrope_section, cfg.head_dim // 2), persistent=False
        )

    def use_grouped_mm(self, enabled: bool) -> None:
        for layer in self.layers:
            layer.mlp.experts.use_grouped_mm = enabled

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, kv: KVPool, slots: torch.Tensor, start: torch.Tensor,
        length: int | None = None,
    ) -> torch.Tensor:
        """Run `x` `(B, T, dim)` at M-RoPE `positions` `(3, B, T)`, rows cached from `start` in `slots`.

        `length` (cached positions attended, `max(start) + T`) is read from `start` unless given: a CUDA graph
        capture cannot read a device tensor. Returns the final-normed hidden states `(B, T, dim)`; logits are
        `codec_head` of them.
        """
        steps = x.shape[1]
        length = int(start.max()) + steps if length is None else length
        kv.check_capacity(length)
        mask = causal_mask(start, steps, length)
        cos_sin = mrope_cos_sin(positions, self.inv_freq, self.freq_axis, x.dtype)
        for i, layer in enumerate(self.layers):
            x = x + layer.self_attn(layer.input_layernorm(x), cos_sin, kv, i, slots, start, mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)

    def new_kv(self, num_slots: int, capacity: int) -> KVPool:
        p = self.codec_head.weight
        return KVPool(
            self.cfg.num_layers, num_slots, capacity, self.cfg.num_kv_heads, self.cfg.head_dim, p.device, p.dtype
        )
