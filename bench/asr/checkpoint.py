"""A Qwen3-ASR checkpoint at the released 1.7B dims (docs/model-dims.md) with random weights, for the
Transcribe benchmark: the demo checkpoint's layout, tokenizer and processor files, its config widened to the real
dims, and transformers' own init written as one bf16 safetensors file (bench/random_weights.py says why).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.random_weights import write_random_weights
from runtime.checkpoint.asr.demo_config import demo_config, generation_config
from runtime.checkpoint.tokenizer_files import write_json

# The demo checkpoint's files a random-weight dir takes over unchanged (the real Qwen vocabulary and template).
COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.json", "preprocessor_config.json")

AUDIO_DIMS = {"encoder_layers": 24, "d_model": 1024, "encoder_attention_heads": 16, "encoder_ffn_dim": 4096,
              "num_mel_bins": 128, "n_window": 50, "n_window_infer": 800, "downsample_hidden_size": 480}
TEXT_DIMS = {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True}


def real_config() -> dict[str, Any]:
    """The demo's `-hf` config.json with the released Qwen3-ASR-1.7B widths (ids, chunking and RoPE unchanged)."""
    cfg = demo_config()
    cfg["audio_config"].update(AUDIO_DIMS, output_dim=TEXT_DIMS["hidden_size"])
    cfg["text_config"].update(TEXT_DIMS)
    return cfg


def dims_of(config: dict[str, Any]) -> dict[str, Any]:
    """What the result file records of a config: the encoder's and decoder's widths."""
    audio, text = config["audio_config"], config["text_config"]
    return {"audio_encoder": {k: audio[k] for k in (*AUDIO_DIMS, "output_dim")},
            "decoder": {k: text[k] for k in TEXT_DIMS}}


def build_random_checkpoint(out_dir: Path, template_dir: Path, device: torch.device, dtype: torch.dtype,
                            seed: int = 0) -> Path:
    """Writes config.json, generation_config.json, the weights and the template dir's tokenizer and processor files
    into `out_dir` (created); -> out_dir. The model is built on `device` (the GPU: seconds)."""
    from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in COPIED_FILES:
        shutil.copyfile(template_dir / name, out_dir / name)
    write_json(out_dir / "config.json", real_config())
    write_json(out_dir / "generation_config.json", generation_config())
    write_random_weights(out_dir, Qwen3ASRForConditionalGeneration, Qwen3ASRConfig, device, dtype, seed,
                         max_shard_size="100GB")  # one file, as the demo checkpoint's
    return out_dir


def default_ckpt_root() -> Path:
    """/dev/shm when it has room for the ~4.1 GB of bf16 weights (RAM-backed: the mesh loads it fast), else tmp."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 8 << 30:
        return shm
    return Path(tempfile.gettempdir())
