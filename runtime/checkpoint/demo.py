"""`build_demo_checkpoint`: a tiny, randomly initialised Qwen3-Omni in the released HF format (dev tool)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.checkpoint import token_ids as ids
from runtime.checkpoint.chat_template_text import CHAT_TEMPLATE, THINKING_CHAT_TEMPLATE
from runtime.checkpoint.demo_config import demo_config
from runtime.checkpoint.demo_init import save_demo_model
from runtime.checkpoint.hf_compat import apply_talker_audio_config_fix
from runtime.checkpoint.processor_files import write_processor_files
from runtime.checkpoint.tokenizer_files import write_json, write_tokenizer_files

WEIGHTS_FILE = "model.safetensors"


def generation_config() -> dict[str, Any]:
    return {
        "bos_token_id": ids.ENDOFTEXT,
        "eos_token_id": [ids.IM_END, ids.ENDOFTEXT],
        "pad_token_id": ids.ENDOFTEXT,
    }


def write_weights(out_dir: Path, seed: int) -> None:
    """Builds the model in transformers from `out_dir/config.json`, draws its weights, writes `model.safetensors`.

    transformers' `save_pretrained` stores MoE experts one tensor per expert and projection, as the released
    checkpoint does (it fuses them only in memory), so the layout is the real one by construction.
    """
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    config = Qwen3OmniMoeConfig.from_pretrained(out_dir)
    apply_talker_audio_config_fix(config)
    save_demo_model(lambda: Qwen3OmniMoeForConditionalGeneration(config), out_dir, seed, WEIGHTS_FILE)


# Thinking and Captioner checkpoints carry no talker: `enable_audio_output: false` and no talker / code2wav tensors.
SILENT_VARIANTS = ("thinking", "captioner")


def build_demo_checkpoint(out_dir: Path, seed: int = 0, variant: str = "instruct") -> Path:
    """Writes the demo checkpoint into `out_dir` (created if missing) and returns it.

    Same seed, same bytes. Files: config.json, generation_config.json, model.safetensors, tokenizer.json,
    tokenizer_config.json, chat_template.json, preprocessor_config.json, video_preprocessor_config.json.
    `variant` "thinking" or "captioner": the same thinker, without the talker (transformers builds and saves none).
    """
    if variant not in ("instruct", *SILENT_VARIANTS):
        raise ValueError(f"variant {variant!r}: use instruct, thinking or captioner")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = demo_config()
    if variant in SILENT_VARIANTS:
        config["enable_audio_output"] = False
    write_json(out_dir / "config.json", config)
    write_json(out_dir / "generation_config.json", generation_config())
    write_weights(out_dir, seed)
    write_tokenizer_files(out_dir, THINKING_CHAT_TEMPLATE if variant == "thinking" else CHAT_TEMPLATE)
    write_processor_files(out_dir)
    return out_dir
