"""Writes the tokenizer files of a checkpoint: `tokenizer.json`, `tokenizer_config.json`, `chat_template.json`."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from runtime.checkpoint.chat_template_text import CHAT_TEMPLATE
from runtime.checkpoint.tokenizer_convert import TOKENIZER_JSON, cached_tokenizer_json

# The names the transformers Qwen3-Omni processor looks up on its tokenizer (`tokenizer.image_token` etc.).
MEDIA_TOKEN_ROLES: dict[str, str] = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "audio_token": "<|audio_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}


def tokenizer_config(model_max_length: int = 32768, extra_special_tokens: dict[str, str] | None = None,
                     chat_template: str = CHAT_TEMPLATE) -> dict[str, Any]:
    """A Qwen BPE tokenizer_config.json; defaults are the Omni demo's (the ASR demo passes its own)."""
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "model_max_length": model_max_length,
        "extra_special_tokens": dict(MEDIA_TOKEN_ROLES if extra_special_tokens is None else extra_special_tokens),
        "chat_template": chat_template,
    }


def write_json(path: Path, obj: Any) -> None:
    """Stable bytes: sorted keys, fixed indent, trailing newline."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def write_tokenizer_files(out_dir: Path, chat_template: str = CHAT_TEMPLATE) -> None:
    shutil.copyfile(cached_tokenizer_json(), out_dir / TOKENIZER_JSON)
    write_json(out_dir / "tokenizer_config.json", tokenizer_config(chat_template=chat_template))
    # The processor reads its template from here; the tokenizer from tokenizer_config.json.
    write_json(out_dir / "chat_template.json", {"chat_template": chat_template})
