"""Fused weights for the talker's fast step: one GEMM for q/k/v, one for gate/up (the shared expert's also gives its
sigmoid gate's logit), built once at load.

The separate `nn.Linear`s keep working (the eager reference reads them): `fuse_linears` re-points each one's
weight at its rows of the concatenation, so nothing is stored twice.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from services.talker.model.code_predictor import CodePredictor, PredictorLayer
from services.talker.model.layers import QKNormAttention, SwiGLU
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
