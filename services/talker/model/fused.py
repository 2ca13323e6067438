"""Fused weights for the talker's fast step: one GEMM for q/k/v and one for gate/up, built once at load.

The separate `nn.Linear`s keep working (the eager reference reads them): `fuse_linears` re-points each one's
weight at its rows of the concatenation, so nothing is stored twice.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from runtime.kernels import SharedExpert
from services.talker.model.code_predictor import CodePredictor, PredictorLayer
from services.talker.model.layers import QKNormAttention, SwiGLU
from services.talker.model.talker_lm import TalkerLayer, TalkerLM


def fuse_linears(linears: list[nn.Linear]) -> torch.Tensor:
    """Concatenate bias-free linears' weights row-wise and make each weight a view of its rows."""
    fused = torch.cat([m.weight.detach() for m in linears])
    start = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight = nn.Parameter(fused[start:start + rows], requires_grad=False)
        start += rows
    return fused


@dataclass(frozen=True)
class AttentionWeights:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(Hq + 2 Hkv) * D, H]
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    eps: float
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class DenseLayerWeights:
    attn: AttentionWeights
    gate_up: torch.Tensor  # [2I, H], rows [gate; up]
    down: torch.Tensor


@dataclass(frozen=True)
class MoELayerWeights:
    attn: AttentionWeights
    router: torch.Tensor  # [E, H]
    experts_gate_up: torch.Tensor  # [E, 2I, H]
    experts_down: torch.Tensor  # [E, H, I]
    shared: SharedExpert
    top_k: int
    norm_topk_prob: bool


def _attention(attn: QKNormAttention, input_norm: nn.Module, post_norm: nn.Module) -> AttentionWeights:
    return AttentionWeights(
        input_norm.weight, fuse_linears([attn.q_proj, attn.k_proj, attn.v_proj]), attn.q_norm.weight,
        attn.k_norm.weight, attn.o_proj.weight, post_norm.weight, attn.q_norm.eps, attn.num_heads,
        attn.num_kv_heads, attn.head_dim,
    )  # fmt: skip


def _swiglu_gate_up(mlp: SwiGLU) -> torch.Tensor:
    return fuse_linears([mlp.gate_proj, mlp.up_proj])


def predictor_weights(predictor: CodePredictor) -> list[DenseLayerWeights]:
    layers: list[PredictorLayer] = list(predictor.layers)  # type: ignore[arg-type]
    return [
        DenseLayerWeights(_attention(layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm),
                          _swiglu_gate_up(layer.mlp), layer.mlp.down_proj.weight)
        for layer in layers
    ]  # fmt: skip


def talker_weights(lm: TalkerLM) -> list[MoELayerWeights]:
    out = []
    layer: TalkerLayer
    for layer in lm.layers:  # type: ignore[assignment]
        moe = layer.mlp
        shared = SharedExpert(_swiglu_gate_up(moe.shared_expert), moe.shared_expert.down_proj.weight,
                              moe.shared_expert_gate.weight)
        out.append(MoELayerWeights(
            _attention(layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm), moe.gate.weight,
            moe.experts.gate_up_proj, moe.experts.down_proj, shared, moe.gate.top_k, moe.gate.norm_topk_prob,
        ))  # fmt: skip
    return out
