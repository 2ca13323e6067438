"""Qwen3.5's Gated DeltaNet token mixer: projections, short causal conv over q/k/v, the gated delta rule over the
sequence's state slot, a SiLU(z)-gated RMSNorm per value head, and the output projection."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runtime.kernels.causal_conv import causal_conv_decode, causal_conv_prefill_rows
from runtime.kernels.deltanet_gates import deltanet_gates
from runtime.kernels.gated_delta import gated_delta_decode, gated_delta_prefill
from services.thinker.model.config import ThinkerConfig
from services.thinker.model.hybrid_norms import GatedRMSNorm
from services.thinker.model.linear_state import StateContext


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: ThinkerConfig, state_layer: int) -> None:
        """state_layer: this layer's index among the linear layers (its row of the state cache)."""
        super().__init__()
        h = cfg.hybrid
        assert h is not None
        self.state_layer = state_layer
        self.cfg = h
        self.in_proj_qkv = nn.Linear(cfg.hidden_size, h.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(cfg.hidden_size, h.value_dim, bias=False)
        self.in_proj_b = nn.Linear(cfg.hidden_size, h.num_value_heads, bias=False)
        self.in_proj_a = nn.Linear(cfg.hidden_size, h.num_value_heads, bias=False)
        # only its weight [C, 1, K] is used (by runtime.kernels.causal_conv); kept a Conv1d for the checkpoint's name
        self.conv1d = nn.Conv1d(h.conv_dim, h.conv_dim, h.conv_kernel, groups=h.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(h.num_value_heads))
        self.A_log = nn.Parameter(torch.zeros(h.num_value_heads))
        self.norm = GatedRMSNorm(h.value_head_dim, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(h.value_dim, cfg.hidden_size, bias=False)
        self.in_proj_weight: torch.Tensor | None = None  # set by fuse_in_proj for the GPU path

    def fuse_in_proj(self) -> None:
        """The four input projections as one GEMM: their weights become views of one [C + V + 2 Hv, H] tensor
        (the checkpoint's names still load and read them; memory holds them once)."""
        projs = (self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a)
        self.in_proj_weight = torch.cat([p.weight for p in projs])
        start = 0
        for p in projs:
            rows = p.weight.shape[0]
            p.weight = nn.Parameter(self.in_proj_weight[start:start + rows], requires_grad=False)
            start += rows

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [T, H] -> conv input [T, C], z [T, V], b and a [T, Hv]: views of one GEMM's output once fused."""
        if self.in_proj_weight is None:
            return self.in_proj_qkv(x), self.in_proj_z(x), self.in_proj_b(x), self.in_proj_a(x)
        h = self.cfg
        return F.linear(x, self.in_proj_weight).split([h.conv_dim, h.value_dim, h.num_value_heads,
                                                       h.num_value_heads], dim=-1)

    def forward(self, x: torch.Tensor, states: StateContext) -> torch.Tensor:
        """x: [T, H] packed rows -> [T, H]; each row's conv and recurrent state advance in its slot."""
        h, num_tokens = self.cfg, x.shape[0]
        mixed, z, b, a = self._project(x)
        g, beta = deltanet_gates(a, b, self.A_log, self.dt_bias)  # [T, Hv] each; g in fp32
        weight = self.conv1d.weight[:, 0]  # [C, K]
        conv = states.cache.conv[self.state_layer]
        recurrent = states.cache.recurrent[self.state_layer]
        z = z.view(num_tokens, h.num_value_heads, h.value_head_dim)
        if not states.prefill:  # every row decodes, in packed order (decode graphs): no row gathers
            q, k, v = self._split(causal_conv_decode(mixed, weight, conv, states.decode_slots))
            out = gated_delta_decode(q, k, v, g, beta, recurrent, states.decode_slots)
            return self.out_proj(self.norm(out, z).reshape(num_tokens, h.value_dim))
        decode, prefill = states.parts
        out = x.new_empty(num_tokens, h.num_value_heads, h.value_head_dim)  # [T, Hv, Dv]
        if states.decode_rows.numel():
            q, k, v = self._split(causal_conv_decode(mixed[decode], weight, conv, states.decode_slots))
            out[decode] = gated_delta_decode(q, k, v, g[decode], beta[decode], recurrent, states.decode_slots)
        assert states.conv_plan is not None, "build_state_context plans the prefill rows' conv"
        q, k, v = self._split(causal_conv_prefill_rows(mixed[prefill], weight, conv, states.conv_plan))  # [Tp, C]
        out[prefill] = gated_delta_prefill(q, k, v, g[prefill], beta[prefill], recurrent, states.prefill_gathered)
        return self.out_proj(self.norm(out, z).reshape(num_tokens, h.value_dim))  # [T, Hv * Dv] -> [T, H]

    def _split(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[n, C] conv output -> q, k [n, Hk, Dk] and v [n, Hv, Dv]."""
        h, n = self.cfg, mixed.shape[0]
        q, k, v = mixed.split([h.key_dim, h.key_dim, h.value_dim], dim=-1)
        return (q.reshape(n, h.num_key_heads, h.key_head_dim), k.reshape(n, h.num_key_heads, h.key_head_dim),
                v.reshape(n, h.num_value_heads, h.value_head_dim))
