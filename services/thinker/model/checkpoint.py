"""Maps a checkpoint's decoder and LM head tensors (`thinker.model.*` / `thinker.lm_head.*` in Qwen3-Omni,
`model.language_model.*` with a tied head in `-hf` Qwen3-ASR) onto ThinkerLM's state dict, fusing experts."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from runtime.checkpoint.family import read_family
from runtime.weights import load_component
from services.thinker.model.config import ThinkerConfig

_EXPERT = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")
_FUSED = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")


def load_thinker_state_dict(
    ckpt_dir: Path | str, cfg: ThinkerConfig, device: torch.device | str, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """ThinkerLM's state dict read from the checkpoint; no other stage's tensors are opened. A tied head is the
    embedding tensor itself (one copy in memory)."""
    family = read_family(ckpt_dir)
    tensors = load_component(Path(ckpt_dir), family.lm_prefix, device=device, dtype=dtype)
    if family.head_prefix is None or cfg.tie_word_embeddings:
        tensors["lm_head.weight"] = tensors["embed_tokens.weight"]
    else:
        tensors["lm_head.weight"] = load_component(Path(ckpt_dir), family.head_prefix, device=device,
                                                   dtype=dtype)["weight"]
    return fuse_experts(tensors, cfg)


def fuse_experts(tensors: dict[str, torch.Tensor], cfg: ThinkerConfig) -> dict[str, torch.Tensor]:
    """Per-expert `experts.E.{gate,up,down}_proj.weight` -> `gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I].

    Checkpoints store one tensor per expert (what transformers writes, too); already fused tensors pass through.
    Per-expert tensors are dropped layer by layer so peak memory stays near one copy of the weights.
    """
    per_layer: dict[int, dict[tuple[int, str], torch.Tensor]] = {}
    out: dict[str, torch.Tensor] = {}
    for name in list(tensors):
        if m := _EXPERT.match(name):
            per_layer.setdefault(int(m[1]), {})[(int(m[2]), m[3])] = tensors.pop(name)
        elif m := _FUSED.match(name):
            out[f"layers.{m[1]}.mlp.{m[2]}"] = tensors.pop(name)
        else:
            out[name] = tensors.pop(name)
    for layer, parts in sorted(per_layer.items()):
        missing = [(e, p) for e in range(cfg.num_experts) for p in ("gate", "up", "down") if (e, p) not in parts]
        if missing:
            more = "..." if len(missing) > 4 else ""
            raise KeyError(f"layer {layer}: checkpoint lacks expert tensors {missing[:4]}{more}")
        out[f"layers.{layer}.mlp.gate_up_proj"] = torch.stack(
            [torch.cat((parts.pop((e, "gate")), parts.pop((e, "up"))), dim=0) for e in range(cfg.num_experts)]
        )  # [E, 2I, H]
        out[f"layers.{layer}.mlp.down_proj"] = torch.stack(
            [parts.pop((e, "down")) for e in range(cfg.num_experts)]
        )  # [E, H, I]
    return out
