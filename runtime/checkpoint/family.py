"""Which model a checkpoint directory holds (Qwen3-Omni, Qwen3-ASR in its `-hf` or original layout, or Qwen3.5 dense
or MoE), which stages serve it, and where each stage's tensors live in it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Family = Literal["qwen3-omni", "qwen3-asr", "qwen3.5"]
Layout = Literal["omni", "hf", "original"]
OMNI_STAGES = ("vision", "audio", "talker", "thinker")
ASR_STAGES = ("audio", "thinker")
QWEN3_5_STAGES = ("vision", "thinker")
QWEN3_5_MODEL_TYPES = ("qwen3_5", "qwen3_5_moe")


@dataclass(frozen=True)
class CheckpointFamily:
    """What `omnimesh up` starts and what each stage reads, for one checkpoint's `config.json`."""

    family: Family
    layout: Layout
    stages: tuple[str, ...]  # the stage processes this model needs (the gateway besides)
    thinker: dict[str, Any]  # thinker_config-shaped: text_config, audio_config (vision_config for Omni), media ids
    lm_prefix: str  # decoder tensors: embed_tokens, layers.*, norm
    head_prefix: str | None  # the LM head's `weight`; None when it is tied to embed_tokens
    audio_prefix: str | None  # the AuT encoder's tensors; None for a model without audio input
    projector_prefix: str | None  # `-hf` Qwen3-ASR: linear_1 / linear_2 here; else proj1 / proj2 under audio_prefix
    vision_prefix: str | None  # the vision tower's tensors; None for a model without image input

    @property
    def serves_speech(self) -> bool:
        return "talker" in self.stages

    @property
    def serves_vision(self) -> bool:
        return "vision" in self.stages


def read_family(model_dir: Path | str) -> CheckpointFamily:
    path = Path(model_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; pass an HF Qwen3-Omni or Qwen3-ASR checkpoint directory")
    return family_of(json.loads(path.read_text()))


def family_of(root: dict[str, Any]) -> CheckpointFamily:
    """Recognises the model from `config.json`'s model_type / architectures and its nesting."""
    model_type = root.get("model_type", "")
    architectures = root.get("architectures") or []
    if model_type == "qwen3_asr" or any(a.startswith("Qwen3ASR") for a in architectures):
        return _asr(root)
    if model_type == "qwen3_omni_moe" or "thinker_config" in root:
        return _omni(root)
    if model_type in QWEN3_5_MODEL_TYPES or any(a.startswith("Qwen3_5") for a in architectures):
        return _qwen3_5(root)
    raise ValueError(f"config.json model_type {model_type!r} (architectures {architectures}) is not served; "
                     "omnimesh serves Qwen3-Omni (qwen3_omni_moe), Qwen3-ASR (qwen3_asr) and Qwen3.5 (qwen3_5, "
                     "qwen3_5_moe)")


def _omni(root: dict[str, Any]) -> CheckpointFamily:
    """Thinking and Captioner checkpoints carry no talker (`enable_audio_output: false`): no talker stage."""
    speaks = bool(root.get("enable_audio_output", "talker_config" in root)) and "talker_config" in root
    stages = tuple(s for s in OMNI_STAGES if s != "talker" or speaks)
    return CheckpointFamily("qwen3-omni", "omni", stages, root["thinker_config"], "thinker.model.",
                            "thinker.lm_head.", "thinker.audio_tower.", None, "thinker.visual.")


def _asr(root: dict[str, Any]) -> CheckpointFamily:
    if "thinker_config" in root:  # the original release: Omni's thinker nesting and names
        thinker = root["thinker_config"]
        tied = bool(thinker.get("text_config", {}).get("tie_word_embeddings", root.get("tie_word_embeddings", True)))
        return CheckpointFamily("qwen3-asr", "original", ASR_STAGES, thinker, "thinker.model.",
                                None if tied else "thinker.lm_head.", "thinker.audio_tower.", None, None)
    if "text_config" not in root or "audio_config" not in root:
        raise ValueError("config.json is a qwen3_asr config without text_config/audio_config (or a nested "
                         "thinker_config); is the checkpoint complete?")
    tied = bool(root.get("tie_word_embeddings", root["text_config"].get("tie_word_embeddings", True)))
    return CheckpointFamily("qwen3-asr", "hf", ASR_STAGES, root, "model.language_model.",
                            None if tied else "lm_head.", "model.audio_tower.", "model.multi_modal_projector.", None)


def _qwen3_5(root: dict[str, Any]) -> CheckpointFamily:
    """transformers' Qwen3_5(Moe)ForConditionalGeneration: vision and the hybrid LM, no audio in or out. The
    `mtp.*` tensors released checkpoints carry are under no prefix read here, so they are never loaded."""
    missing = [key for key in ("text_config", "vision_config") if not isinstance(root.get(key), dict)]
    if missing:
        raise ValueError(f"config.json is a {root.get('model_type', 'qwen3_5')} config without {' / '.join(missing)}; "
                         "Qwen3.5 checkpoints (Qwen3_5ForConditionalGeneration) nest both; is the checkpoint complete?")
    tied = bool(root.get("tie_word_embeddings", root["text_config"].get("tie_word_embeddings", False)))
    return CheckpointFamily("qwen3.5", "hf", QWEN3_5_STAGES, root, "model.language_model.",
                            None if tied else "lm_head.", None, None, "model.visual.")
