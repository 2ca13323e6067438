"""Where a stage finds its checkpoint: a directory, or the demo checkpoint built once into a cache directory."""
from __future__ import annotations

import os
from pathlib import Path

DEMO = "demo"
DEMO_ASR = "demo-asr"
DEMO_QWEN3_5 = "demo-qwen3.5"
DEMO_QWEN3_5_MOE = "demo-qwen3.5-moe"
DEMO_SEED = 0


def cache_dir() -> Path:
    """$OMNIMESH_CACHE, else ~/.cache/omnimesh (read when called, never at import)."""
    return Path(os.environ.get("OMNIMESH_CACHE") or Path.home() / ".cache" / "omnimesh")


def resolve_model(model: str) -> Path:
    """The checkpoint directory for `model`: a path, "demo", "demo-asr", "demo-qwen3.5" or "demo-qwen3.5-moe" (built
    into the cache on first use)."""
    if model in (DEMO_QWEN3_5, DEMO_QWEN3_5_MOE):
        from runtime.checkpoint.qwen3_5.demo_cache import cached_qwen3_5_demo_checkpoint

        return cached_qwen3_5_demo_checkpoint(DEMO_SEED, model == DEMO_QWEN3_5_MOE, cache_dir() / "demo_ckpt")
    if model == DEMO_ASR:
        from runtime.checkpoint.asr.demo_cache import cached_asr_demo_checkpoint

        return cached_asr_demo_checkpoint(DEMO_SEED, cache_dir() / "demo_ckpt")
    if model == DEMO:
        from runtime.checkpoint.demo_cache import cached_demo_checkpoint  # builds with transformers: import lazily

        return cached_demo_checkpoint(DEMO_SEED, cache_dir() / "demo_ckpt")
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"model {model!r}: no config.json there; pass an HF Qwen3-Omni, Qwen3-ASR or Qwen3.5 "
                                f"checkpoint directory, '{DEMO}', '{DEMO_ASR}', '{DEMO_QWEN3_5}' or "
                                f"'{DEMO_QWEN3_5_MOE}'")
    return path
