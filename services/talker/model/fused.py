"""Fused weights for the talker's fast step: one GEMM for q/k/v, one for gate/up (the shared expert's also gives its
sigmoid gate's logit), built once at load.

The separate `nn.Linear`s keep working (the eager reference reads them): `fuse_linears` re-points each one's
weight at its rows of the concatenation, so nothing is stored twice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from runtime.kernels.dense_step import DenseStack

from services.talker.model.code_predictor import CodePredictor, PredictorLayer
from services.talker.model.layers import QKNormAttention
from services.talker.model.talker_lm import TalkerLayer, TalkerLM


# The shared expert's fused output rows are padded to a multiple of this: 16-byte aligned bf16 rows, which cuBLAS's
# fast kernels need (2I + 1 columns would not be).
ROW_MULTIPLE = 8


def fuse_linears(linears: list[nn.Linear], row_multiple: int = 1) -> torch.Tensor:
    """Concatenate bias-free linears' weights row-wise (zero rows appended up to a multiple of `row_multiple`) and
    make each weight a view of its rows."""
    weights = [m.weight.detach() for m in linears]
    rows = sum(w.shape[0] for w in weights)
    padding = -rows % row_multiple
    fused = torch.cat(weights + [weights[0].new_zeros(padding, weights[0].shape[1])])
    _repoint(linears, fused)
    return fused


def stack_layers(groups: list[list[nn.Module]]) -> torch.Tensor:
    """`[L, rows, ...]`: group l's weights concatenated row-wise at index l, each weight made a view of its rows."""
    stacked = torch.stack([torch.cat([m.weight.detach() for m in group]) for group in groups])
    for group, layer in zip(groups, stacked):
        _repoint(group, layer)
    return stacked


def _repoint(modules: list[nn.Module], fused: torch.Tensor) -> None:
    start = 0
    for m in modules:
        rows = m.weight.shape[0]
        m.weight = nn.Parameter(fused[start:start + rows], requires_grad=False)
        start += rows


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
class SharedExpertWeights:
    """sigmoid(x @ gate^T) * down(silu(x @ gate_proj^T) * (x @ up_proj^T)) from two GEMMs: the gate's one row
    rides along in the gate/up GEMM instead of a one-column GEMV of its own."""

    gate_up_gate: torch.Tensor  # [2I + 1 + padding, H]: rows [gate_proj; up_proj; gate; zeros]
    down: torch.Tensor  # [H, I]
    intermediate: int  # I


@dataclass(frozen=True)
class MoELayerWeights:
    attn: AttentionWeights
    router: torch.Tensor  # [E, H]
    experts_gate_up: torch.Tensor  # [E, 2I, H]
    experts_down: torch.Tensor  # [E, H, I]
    shared: SharedExpertWeights
    top_k: int
    norm_topk_prob: bool


def _attention(attn: QKNormAttention, input_norm: nn.Module, post_norm: nn.Module) -> AttentionWeights:
    return AttentionWeights(
        input_norm.weight, fuse_linears([attn.q_proj, attn.k_proj, attn.v_proj]), attn.q_norm.weight,
        attn.k_norm.weight, attn.o_proj.weight, post_norm.weight, attn.q_norm.eps, attn.num_heads,
        attn.num_kv_heads, attn.head_dim,
    )  # fmt: skip


class PredictorWeights(NamedTuple):
    layers: list[DenseLayerWeights]  # views of `stack`'s
    stack: DenseStack  # every layer's weights stacked, as the persistent step reads them
    embeddings: torch.Tensor  # [G-1, V, H]: codec_embedding[g - 1] at g - 1


def predictor_weights(predictor: CodePredictor) -> PredictorWeights:
    """The predictor's weights stacked by layer (its modules re-pointed at the stacks: nothing is stored twice)."""
    layers: list[PredictorLayer] = list(predictor.layers)  # type: ignore[arg-type]
    attn = [layer.self_attn for layer in layers]
    qkv = stack_layers([[a.q_proj, a.k_proj, a.v_proj] for a in attn])
    o = stack_layers([[a.o_proj] for a in attn])
    q_norm, k_norm = stack_layers([[a.q_norm] for a in attn]), stack_layers([[a.k_norm] for a in attn])
    input_norm = stack_layers([[layer.input_layernorm] for layer in layers])
    post_norm = stack_layers([[layer.post_attention_layernorm] for layer in layers])
    gate_up = stack_layers([[layer.mlp.gate_proj, layer.mlp.up_proj] for layer in layers])
    down = stack_layers([[layer.mlp.down_proj] for layer in layers])
    a = attn[0]
    per_layer = [
        DenseLayerWeights(AttentionWeights(input_norm[i], qkv[i], q_norm[i], k_norm[i], o[i], post_norm[i],
                                           a.q_norm.eps, a.num_heads, a.num_kv_heads, a.head_dim), gate_up[i], down[i])
        for i in range(len(layers))
    ]  # fmt: skip
    stack = DenseStack(qkv, o, gate_up, down, input_norm, post_norm, q_norm, k_norm, predictor.norm.weight,
                       a.num_heads, a.num_kv_heads, a.head_dim, a.q_norm.eps)
    return PredictorWeights(per_layer, stack, stack_layers([[e] for e in predictor.codec_embedding]))


def talker_weights(lm: TalkerLM) -> list[MoELayerWeights]:
    out = []
    layer: TalkerLayer
    for layer in lm.layers:  # type: ignore[assignment]
        moe = layer.mlp
        expert = moe.shared_expert
        shared = SharedExpertWeights(
            fuse_linears([expert.gate_proj, expert.up_proj, moe.shared_expert_gate], ROW_MULTIPLE),
            expert.down_proj.weight, expert.gate_proj.weight.shape[0],
        )  # fmt: skip
        out.append(MoELayerWeights(
            _attention(layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm), moe.gate.weight,
            moe.experts.gate_up_proj, moe.experts.down_proj, shared, moe.gate.top_k, moe.gate.norm_topk_prob,
        ))  # fmt: skip
    return out
