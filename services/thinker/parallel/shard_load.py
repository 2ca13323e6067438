"""Reads one rank's shard of the thinker's checkpoint tensors: only its rows / columns leave the safetensors files
(safe_open slices), so a rank never holds the whole decoder, not even while loading. Only rank 0 reads the
embedding and the LM head (it alone embeds tokens and computes logits)."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from runtime.checkpoint.family import read_family
from runtime.weights import shard_files_for_prefix
from services.thinker.model.checkpoint import fuse_experts
from services.thinker.parallel.plan import ShardPlan, Span

Slicer = Callable[[object], torch.Tensor]  # a safetensors slice -> the rank's part of it

RANK0_ONLY = ("embed_tokens.weight",)


def _rows(span: Span) -> Slicer:
    return lambda t: t[span.start:span.stop]


def _cols(span: Span) -> Slicer:
    return lambda t: t[:, span.start:span.stop]


def _row_spans(spans: tuple[Span, ...]) -> Slicer:
    """Several row blocks, concatenated: a DeltaNet layer's q, k and v channels of the rank's heads."""
    return lambda t: torch.cat([t[s.start:s.stop] for s in spans])


def _fused_gate_up(span: Span, width: int) -> Slicer:
    """gate_up_proj [E, 2I, H] (gate rows, then up rows): the rank's rows of each half."""
    return lambda t: torch.cat((t[:, span.start:span.stop], t[:, width + span.start:width + span.stop]), dim=1)


def _fused_down(span: Span) -> Slicer:
    """down_proj [E, H, I]: the rank's columns."""
    return lambda t: t[:, :, span.start:span.stop]


def slicer_for(name: str, plan: ShardPlan) -> Slicer | None:
    """How rank `plan.rank` reads tensor `name` (relative to the LM prefix); None: it holds the whole tensor."""
    if plan.cfg.hybrid is not None:
        cut = _hybrid_slicer(name, plan)
        if cut is not None:
            return cut
    if re.fullmatch(r"layers\.\d+\.self_attn\.q_proj\.(weight|bias)", name):
        return _rows(plan.q_rows)
    if re.fullmatch(r"layers\.\d+\.self_attn\.[kv]_proj\.(weight|bias)", name):
        return _rows(plan.kv_rows)
    if re.fullmatch(r"layers\.\d+\.self_attn\.o_proj\.weight", name):
        return _cols(plan.q_rows)
    if re.fullmatch(r"layers\.\d+\.mlp\.experts\.\d+\.(gate|up)_proj\.weight", name):
        return _rows(plan.expert_cols)
    if re.fullmatch(r"layers\.\d+\.mlp\.experts\.\d+\.down_proj\.weight", name):
        return _cols(plan.expert_cols)
    if re.fullmatch(r"layers\.\d+\.mlp\.experts\.gate_up_proj", name):
        return _fused_gate_up(plan.expert_cols, plan.cfg.moe_intermediate_size)
    if re.fullmatch(r"layers\.\d+\.mlp\.experts\.down_proj", name):
        return _fused_down(plan.expert_cols)
    if re.fullmatch(r"layers\.\d+\.mlp\.(gate|up)_proj\.weight", name):
        return _rows(plan.dense_cols)
    if re.fullmatch(r"layers\.\d+\.mlp\.down_proj\.weight", name):
        return _cols(plan.dense_cols)
    return None


def _hybrid_slicer(name: str, plan: ShardPlan) -> Slicer | None:
    """Qwen3.5's own tensors: gated attention's q_proj (query and gate rows per head), the Gated-DeltaNet layers'
    (by key heads and the value heads they serve; the conv is per channel, so it splits with in_proj_qkv's rows)
    and the MoE's shared expert (by width; its scalar gate is replicated). The rest splits as Qwen3-Omni's."""
    if re.fullmatch(r"layers\.\d+\.self_attn\.q_proj\.(weight|bias)", name):
        return _rows(plan.gated_q_rows)
    if re.fullmatch(r"layers\.\d+\.linear_attn\.(in_proj_qkv|conv1d)\.weight", name):
        return _row_spans(plan.conv_channels)
    if re.fullmatch(r"layers\.\d+\.linear_attn\.in_proj_z\.weight", name):
        return _rows(plan.linear_value_rows)
    if re.fullmatch(r"layers\.\d+\.linear_attn\.(in_proj_[ab]\.weight|A_log|dt_bias)", name):
        return _rows(plan.linear_value_heads)
    if re.fullmatch(r"layers\.\d+\.linear_attn\.out_proj\.weight", name):
        return _cols(plan.linear_value_rows)
    if re.fullmatch(r"layers\.\d+\.mlp\.shared_expert\.(gate|up)_proj\.weight", name):
        return _rows(plan.shared_expert_cols)
    if re.fullmatch(r"layers\.\d+\.mlp\.shared_expert\.down_proj\.weight", name):
        return _cols(plan.shared_expert_cols)
    return None


def load_rank_state_dict(ckpt_dir: Path | str, plan: ShardPlan, device: torch.device | str,
                         dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The rank's state dict for a ShardedThinkerLM built from `plan.shard_config`: sliced tensors, replicated
    norms and routers, experts fused; rank 0 also gets embed_tokens and lm_head, the others neither."""
    ckpt_dir = Path(ckpt_dir)
    family = read_family(ckpt_dir)
    tensors = _read(ckpt_dir, family.lm_prefix, plan, device, dtype)
    if plan.rank == 0:
        if family.head_prefix is None or plan.cfg.tie_word_embeddings:
            tensors["lm_head.weight"] = tensors["embed_tokens.weight"]
        else:
            tensors["lm_head.weight"] = _read(ckpt_dir, family.head_prefix, plan, device, dtype)["weight"]
    if plan.rank != 0 and plan.cfg.attention_bias:  # o_proj's bias is added once, by rank 0, before the sum
        for name in [n for n in tensors if n.endswith("self_attn.o_proj.bias")]:
            tensors[name] = torch.zeros_like(tensors[name])
    return fuse_experts(tensors, plan.shard_config)


def _read(ckpt_dir: Path, prefix: str, plan: ShardPlan, device: torch.device | str,
          dtype: torch.dtype) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for shard in shard_files_for_prefix(ckpt_dir, prefix):
        with safe_open(str(shard), framework="pt", device="cpu") as f:
            for full_name in f.keys():
                if not full_name.startswith(prefix):
                    continue
                name = full_name[len(prefix):]
                if plan.rank != 0 and name in RANK0_ONLY:
                    continue
                cut = slicer_for(name, plan)
                t = f.get_tensor(full_name) if cut is None else cut(f.get_slice(full_name))
                if t.is_floating_point():
                    t = t.to(dtype)
                tensors[name] = t.contiguous().to(device)
    if not tensors:
        raise KeyError(f"no tensor named {prefix!r}* in {ckpt_dir}")
    return tensors
