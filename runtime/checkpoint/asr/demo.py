"""`build_asr_demo_checkpoint`: a tiny, randomly initialised Qwen3-ASR in the `-hf` layout (dev tool), and the same
weights rewritten into the original layout (`thinker.` prefixes, nested `thinker_config`)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from runtime.checkpoint.asr import token_ids as ids
from runtime.checkpoint.asr.chat_template_text import CHAT_TEMPLATE
from runtime.checkpoint.asr.demo_config import demo_config, generation_config, preprocessor_config
from runtime.checkpoint.demo_init import save_demo_model
from runtime.checkpoint.tokenizer_convert import TOKENIZER_JSON, cached_tokenizer_json
from runtime.checkpoint.tokenizer_files import tokenizer_config as shared_tokenizer_config
from runtime.checkpoint.tokenizer_files import write_json

WEIGHTS_FILE = "model.safetensors"
# `-hf` name prefix -> original-layout prefix; the projector's two linears were the AuT's proj1 / proj2.
ORIGINAL_PREFIXES: tuple[tuple[str, str], ...] = (
    ("model.multi_modal_projector.linear_1.", "thinker.audio_tower.proj1."),
    ("model.multi_modal_projector.linear_2.", "thinker.audio_tower.proj2."),
    ("model.audio_tower.", "thinker.audio_tower."),
    ("model.language_model.", "thinker.model."),
)


def tokenizer_config() -> dict[str, Any]:
    return shared_tokenizer_config(
        model_max_length=65536, chat_template=CHAT_TEMPLATE,
        extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                              "audio_eos_token": "<|audio_end|>"})


def write_weights(out_dir: Path, seed: int) -> None:
    """Builds the model in transformers from `out_dir/config.json`, draws every parameter, saves it."""
    from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    config = Qwen3ASRConfig.from_pretrained(out_dir)
    save_demo_model(lambda: Qwen3ASRForConditionalGeneration(config), out_dir, seed, WEIGHTS_FILE)


def write_tokenizer_files(out_dir: Path) -> None:
    shutil.copyfile(cached_tokenizer_json(specials=ids.SPECIAL_TOKENS, plain=ids.PLAIN_TOKENS),
                    out_dir / TOKENIZER_JSON)
    write_json(out_dir / "tokenizer_config.json", tokenizer_config())
    write_json(out_dir / "chat_template.json", {"chat_template": CHAT_TEMPLATE})


def build_asr_demo_checkpoint(out_dir: Path, seed: int = 0) -> Path:
    """Writes the Qwen3-ASR demo checkpoint into `out_dir` (created if missing) and returns it. Same seed, same bytes.

    Files: config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
    chat_template.json, preprocessor_config.json.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "config.json", demo_config())
    write_json(out_dir / "generation_config.json", generation_config())
    write_weights(out_dir, seed)
    write_tokenizer_files(out_dir)
    write_json(out_dir / "preprocessor_config.json", preprocessor_config())
    return out_dir


def original_name(name: str) -> str:
    for hf, original in ORIGINAL_PREFIXES:
        if name.startswith(hf):
            return original + name[len(hf):]
    raise KeyError(f"{name}: not a Qwen3-ASR -hf tensor name")


def original_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The original layout's config.json: audio and text configs nested under `thinker_config` with the ids."""
    thinker_keys = ("audio_token_id", "timestamp_token_id", "pad_token_id", "eos_token_id")
    thinker = {key: hf_config[key] for key in thinker_keys if key in hf_config}
    thinker.update(audio_config=hf_config["audio_config"], text_config=hf_config["text_config"])
    return {"architectures": ["Qwen3ASRForConditionalGeneration"], "model_type": "qwen3_asr",
            "thinker_config": thinker}


def write_original_layout(hf_dir: Path, out_dir: Path) -> Path:
    """Rewrites an `-hf` Qwen3-ASR directory in the original layout; the LM head is stored (as `thinker.lm_head`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in Path(hf_dir).iterdir():
        if path.name not in ("config.json", WEIGHTS_FILE) and path.is_file():
            shutil.copyfile(path, out_dir / path.name)
    hf = json.loads((Path(hf_dir) / "config.json").read_text())
    write_json(out_dir / "config.json", original_config(hf))
    tensors = {original_name(name): t for name, t in load_file(str(Path(hf_dir) / WEIGHTS_FILE)).items()}
    tensors["thinker.lm_head.weight"] = tensors["thinker.model.embed_tokens.weight"].clone()
    save_file(tensors, str(out_dir / WEIGHTS_FILE), metadata={"format": "pt"})
    return out_dir
