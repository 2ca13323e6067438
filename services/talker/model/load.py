"""Builds the talker stage's networks from a checkpoint: only `talker.*`, `code2wav.*` and the thinker's embeddings."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from runtime.weights import load_component
from services.talker.model.code2wav import Code2Wav
from services.talker.model.code_predictor import CodePredictor
from services.talker.model.config import TalkerConfig, load_talker_config
from services.talker.model.talker_lm import TalkerLM

EMBED_TABLE = "thinker.model.embed_tokens.weight"
_EXPERT = re.compile(r"^(layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


@dataclass
class TalkerModel:
    """Everything one talker replica runs: the three networks and the thinker's token embedding table."""

    cfg: TalkerConfig
    lm: TalkerLM
    predictor: CodePredictor
    code2wav: Code2Wav
    embed_table: torch.Tensor  # (thinker vocab, thinker hidden)

    @property
    def device(self) -> torch.device:
        return self.embed_table.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_table.dtype

    def text_embeds(self, token_ids: torch.Tensor) -> torch.Tensor:
        """`text_projection` of thinker token embeddings: `(...)` ids -> `(..., talker hidden)`."""
        return self.lm.text_projection(self.embed_table[token_ids])


def fuse_experts(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert `experts.E.{gate,up,down}_proj.weight` -> fused `experts.gate_up_proj` / `experts.down_proj`."""
    out: dict[str, torch.Tensor] = {}
    per_expert: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for name, t in state.items():
        m = _EXPERT.match(name)
        if m is None:
            out[name] = t
        else:
            per_expert.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = t
    for prefix, experts in per_expert.items():
        ids = sorted(experts)
        if ids != list(range(len(ids))):
            raise ValueError(f"{prefix}: expert ids {ids[:4]}... are not 0..E-1; is the checkpoint complete?")
        out[f"{prefix}.gate_up_proj"] = torch.stack([torch.cat((experts[e]["gate"], experts[e]["up"])) for e in ids])
        out[f"{prefix}.down_proj"] = torch.stack([experts[e]["down"] for e in ids])
    return out


def cast_parameters(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast parameters only: rotary frequency buffers stay fp32, index buffers stay integer."""
    for p in module.parameters():
        p.data = p.data.to(dtype)
    return module


def _strip(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in state.items()}


def split_talker_state(talker: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """`talker.*` tensors (prefix already stripped) -> (TalkerLM state, CodePredictor state)."""
    lm = {k: v for k, v in talker.items() if not k.startswith("code_predictor.")}
    predictor = {k[len("code_predictor.") :]: v for k, v in talker.items() if k.startswith("code_predictor.")}
    lm = fuse_experts(_strip(lm, "model."))
    if "codec_head.weight" not in lm:  # only a tied checkpoint omits it
        lm["codec_head.weight"] = lm["codec_embedding.weight"]
    return lm, _strip(predictor, "model.")


def build_module(module: nn.Module, state: dict[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    module = cast_parameters(module, dtype)
    module.load_state_dict(state, strict=True)
    return module.eval().requires_grad_(False)


def load_talker_model(
    ckpt_dir: Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> TalkerModel:
    """Load the talker stage from an HF-format Qwen3-Omni directory (safetensors, `config.json`)."""
    cfg = load_talker_config(Path(ckpt_dir))
    talker = load_component(ckpt_dir, "talker.", device, dtype)
    lm_state, predictor_state = split_talker_state(talker)
    with torch.device(device):
        lm = build_module(TalkerLM(cfg.lm), lm_state, dtype)
        predictor = build_module(CodePredictor(cfg.code_predictor), predictor_state, dtype)
        code2wav = build_module(Code2Wav(cfg.code2wav), load_component(ckpt_dir, "code2wav.", device, dtype), dtype)
    embed = load_component(ckpt_dir, EMBED_TABLE, device, dtype)[""]
    assert isinstance(lm, TalkerLM) and isinstance(predictor, CodePredictor) and isinstance(code2wav, Code2Wav)
    return TalkerModel(cfg, lm, predictor, code2wav, embed)
