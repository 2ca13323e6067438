"""`build_qwen3_5_demo_checkpoint`: a tiny, randomly initialised Qwen3.5 (dense or MoE) in transformers'
ConditionalGeneration layout (`model.visual.*`, `model.language_model.*`, `lm_head.*`, and `mtp.*` as released
checkpoints carry), with its own small tokenizer (the Omni demo's: Qwen2's BPE and the Qwen specials from 151643) and
processor files."""
from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from runtime.checkpoint.demo_init import save_demo_model
from runtime.checkpoint.qwen3_5.chat_template_text import CHAT_TEMPLATE
from runtime.checkpoint.qwen3_5.demo_config import TEXT_HIDDEN, demo_config, generation_config
from runtime.checkpoint.qwen3_5.processor_files import write_processor_files
from runtime.checkpoint.tokenizer_convert import TOKENIZER_JSON, cached_tokenizer_json
from runtime.checkpoint.tokenizer_files import tokenizer_config as shared_tokenizer_config
from runtime.checkpoint.tokenizer_files import write_json

WEIGHTS_FILE = "model.safetensors"
# The names Qwen3VLProcessor looks up on its tokenizer.
MEDIA_TOKEN_ROLES = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                     "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"}


def tokenizer_config() -> dict[str, Any]:
    return shared_tokenizer_config(model_max_length=262144, extra_special_tokens=MEDIA_TOKEN_ROLES,
                                   chat_template=CHAT_TEMPLATE)


def write_weights(out_dir: Path, seed: int, moe: bool) -> None:
    """Builds the model in transformers from `out_dir/config.json`, draws every parameter, saves it."""
    import transformers

    prefix = "Qwen3_5Moe" if moe else "Qwen3_5"
    config = getattr(transformers, f"{prefix}Config").from_pretrained(out_dir)
    model_class = getattr(transformers, f"{prefix}ForConditionalGeneration")
    save_demo_model(lambda: model_class(config), out_dir, seed, WEIGHTS_FILE)


def mtp_tensors(seed: int, hidden: int = TEXT_HIDDEN) -> dict[str, torch.Tensor]:
    """Stand-ins for the multi-token-prediction head released checkpoints carry under `mtp.` (its input projection
    over [embedding; hidden] and its norms), drawn from their own seeded stream: transformers skips `mtp.*` on load,
    and so must every stage here."""
    gen = torch.Generator().manual_seed(seed + 1)
    return {
        "mtp.fc.weight": torch.randn(hidden, 2 * hidden, generator=gen) / math.sqrt(2 * hidden),
        "mtp.pre_fc_norm_embedding.weight": torch.randn(hidden, generator=gen) * 0.1,
        "mtp.pre_fc_norm_hidden.weight": torch.randn(hidden, generator=gen) * 0.1,
        "mtp.norm.weight": torch.randn(hidden, generator=gen) * 0.1,
    }


def add_mtp_tensors(out_dir: Path, seed: int) -> None:
    path = out_dir / WEIGHTS_FILE
    tensors = load_file(str(path))
    tensors.update(mtp_tensors(seed))
    save_file(tensors, str(path), metadata={"format": "pt"})


def write_tokenizer_files(out_dir: Path) -> None:
    shutil.copyfile(cached_tokenizer_json(), out_dir / TOKENIZER_JSON)
    write_json(out_dir / "tokenizer_config.json", tokenizer_config())
    write_json(out_dir / "chat_template.json", {"chat_template": CHAT_TEMPLATE})


def build_qwen3_5_demo_checkpoint(out_dir: Path, seed: int = 0, moe: bool = False) -> Path:
    """Writes the demo checkpoint into `out_dir` (created if missing) and returns it. Same seed, same bytes.

    Files: config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
    chat_template.json, preprocessor_config.json, video_preprocessor_config.json.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "config.json", demo_config(moe))
    write_json(out_dir / "generation_config.json", generation_config())
    write_weights(out_dir, seed, moe)
    add_mtp_tensors(out_dir, seed)
    write_tokenizer_files(out_dir)
    write_processor_files(out_dir)
    return out_dir
